"""What the churn tests share: a namespace under seeded random actions -- pods stuck
terminating, the API server restarted --, a timeline of what was done, and reading back what is
left unfinished. :class:`Churn` is subclassed per test with its own actions."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from auditor import Auditor

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.devcluster.client import MERGE_PATCH

STUCK = "example.com/stuck"  # a finalizer nobody removes until the churn is over


class Churn:
    """The namespace ``ns`` of one run and the random actions on it (``seed``); deletions
    are told to ``auditor`` (by uid: a name may come back)."""

    def __init__(
        self, cp: ControlPlane, api: KubeClient, ns: str, auditor: Auditor, seed: int
    ) -> None:
        self.cp, self.api, self.ns, self.auditor = cp, api, ns, auditor
        self.rng = random.Random(seed)
        self.stuck: list[str] = []  # pods deleted while a finalizer holds them
        self.done: dict[str, int] = {}  # what was done, by action
        self.timeline: list[str] = []  # what was done when, printed with the audit
        self.t0 = time.monotonic()

    def note(self, what: str) -> None:
        self.timeline.append(f"{time.monotonic() - self.t0:7.2f} s  {what}")

    def actions(self) -> dict[str, tuple[Callable[[], None], float]]:
        """The actions a step draws from, with their weights."""
        raise NotImplementedError

    def step(self, name: str | None = None) -> None:
        """One random action (``name``: that one), then a random pause."""
        actions = self.actions()
        weights = [w for _, w in actions.values()]
        name = name or self.rng.choices(list(actions), weights=weights)[0]
        actions[name][0]()
        self.done[name] = self.done.get(name, 0) + 1
        time.sleep(self.rng.uniform(0.05, 0.6))

    # ---- actions --------------------------------------------------------------------------
    def delete(self, pods: list[dict[str, Any]]) -> None:
        """Delete ``pods`` (told to the auditor by uid: a name may come back)."""
        for p in pods:
            self.auditor.expected_deletes.add(p["metadata"]["uid"])
            self.api.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{p['metadata']['name']}")

    def stick(self) -> None:
        """A pod stuck terminating (its node lost, a finalizer nobody removes): deleted while
        it runs, it keeps what it holds until the churn is over (:meth:`unstick`)."""
        running = [
            p["metadata"]["name"]
            for p in self.pods()
            if p["spec"].get("nodeName")
            and p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        if not running:
            return
        name = self.rng.choice(sorted(running))
        path = f"/api/v1/namespaces/{self.ns}/pods/{name}"
        patch = {"metadata": {"finalizers": [STUCK]}}
        if not self.api.request("PATCH", path, patch, content_type=MERGE_PATCH).ok:
            return  # evicted or deleted since it was listed
        self.note(f"deleting {name}, stuck terminating")
        self.delete([p for p in self.pods() if p["metadata"]["name"] == name])
        self.stuck.append(name)

    def unstick(self) -> None:
        """The stuck pods' finalizers removed: they go."""
        for name in self.stuck:
            path = f"/api/v1/namespaces/{self.ns}/pods/{name}"
            if self.api.request("GET", path).ok:
                self.api.patch(path, {"metadata": {"finalizers": None}})
        self.note(f"{len(self.stuck)} stuck pods released")

    def restart_apiserver(self) -> None:
        """kube-apiserver restarts (etcd keeps the data): gracefully or killed; every watch
        ends and resumes with 410 Gone, so every client relists; a request in flight when it
        dies has an unknown outcome."""
        crash = self.rng.random() < 0.5
        self.note(f"API server {'killed' if crash else 'stopped'}; restarting")
        self.cp.restart_apiserver(downtime=self.rng.uniform(0.0, 1.0), crash=crash)
        self.note("API server up")

    # ---- reading back ---------------------------------------------------------------------
    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get(f"/api/v1/namespaces/{self.ns}/pods")["items"]
        return items

    def unfinished(self) -> list[str]:
        """Pods not finished yet -- Succeeded, or failed by the kubelet at their
        ``activeDeadlineSeconds`` -- each with its node ("-" unbound) and PodScheduled
        message."""
        out = []
        for p in self.pods():
            status = p["status"]
            if status.get("phase") == "Succeeded":
                continue
            if status.get("phase") == "Failed" and status.get("reason") == "DeadlineExceeded":
                continue
            cond = [c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
            why = cond[0].get("message", "") if cond else ""
            out.append(f"{p['metadata']['name']}@{p['spec'].get('nodeName', '-')}: {why[:160]}")
        return out
