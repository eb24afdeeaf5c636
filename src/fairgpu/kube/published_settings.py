"""The settings the running scheduler decides with, published for the read-only commands.

``explain``, ``queues``, ``jobs`` and ``what-if`` run the engine over the cluster; their
answers are the scheduler's only when that engine is built as the scheduler's is -- the same
tenancy config, placement policy, queue ordering, node-pool label and seed. Whoever forgot
``--config`` got answers for one queue per namespace, each of weight 1, without a word. So
the scheduler, once it leads (at once without leader election), writes its settings into the
ConfigMap ``<scheduler-name>-settings`` of its lease namespace (:func:`publish`), and the
commands read it (:func:`read_published`) for every setting not given on their command line,
saying where they took it from.

Publishing is best effort: refused (RBAC, no such namespace) it is logged and the scheduler
goes on; a command that cannot read the ConfigMap says so and answers with what it was given.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fairgpu.kube.client import CONNECTION_ERRORS, RestClient

__all__ = ["Published", "configmap_name", "publish", "read_published"]

log = logging.getLogger("fairgpu.kube")

#: The ConfigMap's keys.
KEY_TENANCY = "tenancy.yaml"
KEY_POLICY = "policy"
KEY_ORDERING = "ordering"
KEY_POOL_LABEL = "nodePoolLabel"
KEY_SEED = "seed"
#: Who wrote it and when (RFC 3339), as annotations.
ANN_BY = "fairgpu.io/published-by"
ANN_AT = "fairgpu.io/published-at"


@dataclass(frozen=True, slots=True)
class Published:
    """How a scheduler decides: its tenancy config as YAML text (None: it runs without
    one), policy, ordering, node-pool label and seed; ``by``/``at``: who published it, when."""

    tenancy: str | None
    policy: str
    ordering: str
    node_pool_label: str
    seed: int
    by: str = ""
    at: str = ""


def configmap_name(scheduler_name: str) -> str:
    """The ConfigMap a scheduler named ``scheduler_name`` publishes its settings in."""
    return f"{scheduler_name}-settings"


def tenancy_text(tenancy: str | Path | None) -> str | None:
    """The tenancy config as given to ``fairgpu run`` (a file, or YAML text) as text."""
    if tenancy is None:
        return None
    if isinstance(tenancy, str) and "\n" in tenancy:
        return tenancy
    return Path(tenancy).read_text()


def _configmap(namespace: str, scheduler_name: str, settings: Published) -> dict[str, Any]:
    data = {
        KEY_POLICY: settings.policy,
        KEY_ORDERING: settings.ordering,
        KEY_POOL_LABEL: settings.node_pool_label,
        KEY_SEED: str(settings.seed),
    }
    if settings.tenancy is not None:
        data[KEY_TENANCY] = settings.tenancy
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(scheduler_name),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "fairgpu"},
            "annotations": {ANN_BY: settings.by, ANN_AT: settings.at},
        },
        "data": data,
    }


def publish(client: RestClient, namespace: str, scheduler_name: str, settings: Published) -> bool:
    """Write ``settings`` (stamped now) into the scheduler's ConfigMap, replacing what an
    earlier leader wrote; True when written. Never raises: a refusal is logged."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc = _configmap(namespace, scheduler_name, replace(settings, at=stamp))
    collection = f"/api/v1/namespaces/{namespace}/configmaps"
    path = f"{collection}/{configmap_name(scheduler_name)}"
    try:
        # An update without a resourceVersion replaces whatever is there (a ConfigMap allows
        # it); only a missing one is created.
        resp = client.request("PUT", path, doc)
        if resp.status == 404:
            resp = client.request("POST", collection, doc)
    except CONNECTION_ERRORS as error:
        log.warning("cannot publish the scheduler's settings", extra={"error": str(error)})
        return False
    if not resp.ok:
        log.warning(
            "cannot publish the scheduler's settings; explain, queues, jobs and what-if then "
            "need the same --config, --policy and --ordering",
            extra={"configmap": path, "status": resp.status, "error": resp.message},
        )
        return False
    log.info("settings published", extra={"configmap": path})
    return True


def read_published(
    client: RestClient, namespace: str, scheduler_name: str
) -> tuple[Published | None, str]:
    """The settings scheduler ``scheduler_name`` published in ``namespace``, or None and why
    they could not be read."""
    path = f"/api/v1/namespaces/{namespace}/configmaps/{configmap_name(scheduler_name)}"
    resp = client.request("GET", path, limited=False)
    where = f"ConfigMap {namespace}/{configmap_name(scheduler_name)}"
    if resp.status == 404:
        return None, f"{where} does not exist (no scheduler {scheduler_name!r} published there)"
    if not resp.ok or not isinstance(resp.body, dict):
        return None, f"cannot read {where}: HTTP {resp.status}: {resp.message}"
    data = resp.body.get("data") or {}
    notes = (resp.body.get("metadata") or {}).get("annotations") or {}
    try:
        seed = int(data.get(KEY_SEED, "0"))
    except ValueError:
        return None, f"{where}: data.{KEY_SEED} is not a whole number: {data.get(KEY_SEED)!r}"
    return (
        Published(
            data.get(KEY_TENANCY),
            str(data.get(KEY_POLICY, "")),
            str(data.get(KEY_ORDERING, "")),
            str(data.get(KEY_POOL_LABEL, "")),
            seed,
            str(notes.get(ANN_BY, "")),
            str(notes.get(ANN_AT, "")),
        ),
        where,
    )
