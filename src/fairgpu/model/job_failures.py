"""How a batch/v1 Job counts an evicted pod: the part of its spec the scheduler reads.

An eviction (policy/v1) sets the pod's ``DisruptionTarget`` condition and its kubelet ends it
``Failed`` (its containers killed: exit code 137). The Job controller counts that failed pod
against ``spec.backoffLimit`` unless ``spec.podFailurePolicy`` says otherwise: the first rule
that matches the pod decides -- ``Ignore`` (not counted), ``FailJob`` (the Job fails at once),
``Count``, ``FailIndex`` (the pod's index fails at once: a Job with per-index limits) -- and
no match counts it. A Job whose next counted failure exceeds its limit fails: the controller
deletes its other pods. With ``backoffLimitPerIndex`` each index also has its own limit
(:func:`index_fails_on_eviction`); past ``maxFailedIndexes`` failed indexes the Job fails.
"""

from __future__ import annotations

from typing import Any

#: ``spec.backoffLimit`` when unset.
DEFAULT_BACKOFF_LIMIT = 6
#: The exit code an evicted pod's containers report (killed: 128 + SIGKILL).
EVICTED_EXIT_CODE = 137
ACTIONS = ("Ignore", "FailJob", "Count", "FailIndex")


class PolicyError(ValueError):
    """A pod failure policy the API server would refuse; the message names the field."""


def disruption_action(policy: Any) -> str:
    """What the Job controller does with an evicted pod under ``spec.podFailurePolicy``
    ``policy`` (None: none): ``Ignore``, ``FailJob``, ``FailIndex`` or ``Count``."""
    if policy is None:
        return "Count"
    rules = policy.get("rules") if isinstance(policy, dict) else None
    if not isinstance(rules, list):
        raise PolicyError("spec.podFailurePolicy.rules: must be a list")
    for i, rule in enumerate(rules):
        action = rule.get("action") if isinstance(rule, dict) else None
        if action not in ACTIONS:
            raise PolicyError(
                f"spec.podFailurePolicy.rules[{i}].action: must be Ignore, FailJob, Count or "
                f"FailIndex, not {action!r}"
            )
        if _matches_eviction(rule):
            return str(action)
    return "Count"


def fails_on_next_eviction(action: str, backoff_limit: int, failed: int) -> bool:
    """Whether one more evicted pod fails a Job whose evictions get ``action``, with
    ``backoff_limit`` and ``failed`` pods counted so far (a ``FailIndex`` eviction is not
    counted against ``backoffLimit``)."""
    if action == "FailJob":
        return True
    return action == "Count" and failed + 1 > backoff_limit


def index_fails_on_eviction(action: str, per_index: int, index_failures: int) -> bool:
    """Whether an evicted pod fails its index for good: ``FailIndex``, or a counted failure
    past ``backoffLimitPerIndex`` (``per_index``; ``index_failures``: its index's failures
    counted so far)."""
    if action == "FailIndex":
        return True
    return action == "Count" and index_failures + 1 > per_index


def _matches_eviction(rule: dict[str, Any]) -> bool:
    """Whether a pod failure policy ``rule`` matches an evicted pod."""
    for cond in rule.get("onPodConditions") or ():
        if cond.get("type") == "DisruptionTarget" and cond.get("status", "True") == "True":
            return True
    codes = rule.get("onExitCodes")
    if codes:
        values = codes.get("values") or []
        return bool((EVICTED_EXIT_CODE in values) == (codes.get("operator") == "In"))
    return False


def fails_by_indexes(
    action: str, per_index: int | None, max_failed: int | None, failed_indexes: int
) -> bool:
    """Whether any evicted pod of a Job fails it through its per-index limits: it has
    ``failed_indexes`` failed indexes, ``maxFailedIndexes`` (``max_failed``) already, and
    every eviction fails an index (``backoffLimitPerIndex: 0``, or a ``FailIndex`` rule).
    With a larger per-index limit only the pods whose index is at its limit would -- a
    Job-wide answer cannot say which: such a Job is not counted fragile."""
    if per_index is None or max_failed is None or failed_indexes < max_failed:
        return False
    return action == "FailIndex" or (action == "Count" and per_index == 0)


def count_indexes(text: str | None) -> int:
    """How many indexes ``status.failedIndexes`` (``"1,3-5"``) names; 0 for none or a
    malformed list."""
    total = 0
    for part in (text or "").split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            return 0
        total += max(0, high - low + 1)
    return total
