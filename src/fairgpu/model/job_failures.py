"""How a batch/v1 Job counts an evicted pod: the part of its spec the scheduler reads.

An eviction (policy/v1) sets the pod's ``DisruptionTarget`` condition and its kubelet ends it
``Failed`` (its containers killed: exit code 137). The Job controller counts that failed pod
against ``spec.backoffLimit`` unless ``spec.podFailurePolicy`` says otherwise: the first rule
that matches the pod decides -- ``Ignore`` (not counted), ``FailJob`` (the Job fails at once),
``Count`` (``FailIndex`` counts here) -- and no match counts it. A Job whose next counted
failure exceeds its limit fails: the controller deletes its other pods.
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
    ``policy`` (None: none): ``Ignore``, ``FailJob`` or ``Count``."""
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
            return "Count" if action == "FailIndex" else str(action)
    return "Count"


def fails_on_next_eviction(action: str, backoff_limit: int, failed: int) -> bool:
    """Whether one more evicted pod fails a Job whose evictions get ``action``, with
    ``backoff_limit`` and ``failed`` pods counted so far."""
    if action == "FailJob":
        return True
    return action == "Count" and failed + 1 > backoff_limit


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
