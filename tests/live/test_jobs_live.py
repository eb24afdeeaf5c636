"""batch/v1 Jobs whose pods fairgpu preempts, with the real Job controller.

An eviction (policy/v1) marks the pod with the ``DisruptionTarget`` condition and the kubelet
ends it ``Failed``: the Job controller counts it against ``backoffLimit``, so a Job with
``backoffLimit: 0`` fails for good at its first preemption -- unless its
``podFailurePolicy`` ignores disruptions, which is what docs/running-on-a-cluster.md tells
users to write: then the controller replaces the pod and the Job goes on. fairgpu watches
Jobs and costs one that a single eviction would fail as a whole
(:mod:`fairgpu.engine.fragile_jobs`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_helpers import (
    ask_cli,
    bound,
    condition,
    controller_manager,
    create,
    create_priority_classes,
    pod,
    pods,
    scheduler,
    wait_for,
)
from typer.testing import CliRunner

from fairgpu.cli import app
from fairgpu.devcluster import ControlPlane, KubeClient

pytestmark = pytest.mark.integration

JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
NODE = "lv-training-a100"
TENANCY = """
mode: dynamic
namespaceQueues: false
history: {halfLifeSeconds: 0}
preemption: {reclaimMinRuntimeSeconds: 0, reclaimCooldownSeconds: 0}
queues:
  - {name: a, weight: 1}
  - {name: b, weight: 1}
"""
IGNORE_DISRUPTIONS = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}


@pytest.fixture
def job_controller(live_cp: ControlPlane, kubelet: Any) -> Iterator[None]:
    """The real kube-controller-manager running only the Job controller."""
    with controller_manager(live_cp, "job-controller"):
        yield


def job(name: str, failure_policy: dict[str, Any] | None, gpus: int = 4) -> dict[str, Any]:
    """Queue a's Job of two ``gpus``-GPU pods at once on the A100 training node,
    ``backoffLimit`` 0 (one failed pod fails it), running an hour."""
    template = pod(
        "unused",
        gpus=gpus,
        labels={"fairgpu.io/queue": "a"},
        annotations={"fairgpu.io/duration-seconds": "3600"},
        node_selector={"kubernetes.io/hostname": NODE},
    )
    template["spec"]["restartPolicy"] = "Never"
    spec: dict[str, Any] = {
        "parallelism": 2,
        "completions": 2,
        "backoffLimit": 0,
        "template": {"metadata": template["metadata"], "spec": template["spec"]},
    }
    del spec["template"]["metadata"]["name"]
    if failure_policy is not None:
        spec["podFailurePolicy"] = failure_policy
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def job_condition(admin: KubeClient, ns: str, name: str, kind: str) -> bool:
    got = admin.get(f"{JOBS.format(ns=ns)}/{name}")
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in (got.get("status") or {}).get("conditions") or []
    )


def drop_jobs(admin: KubeClient, ns: str) -> None:
    """Delete the Jobs and let their pods go (no garbage collector runs here): their
    tracking finalizers are removed, as the Job controller does for a deleted Job's pods."""
    for item in admin.get(JOBS.format(ns=ns))["items"]:
        admin.request("DELETE", f"{JOBS.format(ns=ns)}/{item['metadata']['name']}")
    for p in pods(admin, ns):
        if p["metadata"].get("finalizers"):
            path = f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}"
            admin.patch(path, {"metadata": {"finalizers": None}})


def test_a_job_that_ignores_disruptions_gets_its_preempted_pod_replaced(
    live_cp: ControlPlane, admin: KubeClient, ns: str, job_controller: None
) -> None:
    """Queue b, below its share, takes back half of the node from a's Job, whose policy
    ignores disruptions: one pod is evicted, the Job controller replaces it (it waits: the
    node is full), and the Job neither fails nor counts a failure."""
    with scheduler(live_cp, tenancy=TENANCY):
        try:
            admin.post(JOBS.format(ns=ns), job("train", IGNORE_DISRUPTIONS))
            wait_for(lambda: len(bound(admin, ns)) == 2, timeout=30)
            first = set(bound(admin, ns))
            create(admin, ns, b_pod())
            wait_for(lambda: bound(admin, ns).get("b-0") == NODE, timeout=30)

            def replacement() -> set[str]:
                return {p["metadata"]["name"] for p in pods(admin, ns)} - first - {"b-0"}

            assert len(wait_for(replacement, timeout=60)) == 1
            assert not job_condition(admin, ns, "train", "Failed")
            assert not job_status(admin, ns, "train").get("failed")
        finally:
            drop_jobs(admin, ns)


def test_a_job_one_eviction_fails_is_not_reclaimed_for_less_than_it_holds(
    live_cp: ControlPlane, admin: KubeClient, ns: str, job_controller: None, tmp_path: Path
) -> None:
    """The same Job without the rule (``backoffLimit: 0``): evicting one pod would fail it
    and lose both, 8 GPUs for queue b's 4 -- more than the reclaim rule lets b take. b waits;
    the Job runs on untouched; and ``fairgpu explain``, reading the Jobs as the scheduler
    does, says the same of b's next cycle."""
    with scheduler(live_cp, tenancy=TENANCY) as s:
        try:
            admin.post(JOBS.format(ns=ns), job("train", None))
            wait_for(lambda: len(bound(admin, ns)) == 2, timeout=30)
            wait_for(lambda: s.jobs.fragile(), timeout=30)
            first = set(bound(admin, ns))
            create(admin, ns, b_pod())
            wait_for(lambda: unschedulable(admin, ns, "b-0"), timeout=30)
            time.sleep(3)  # cycles come and go: b stays pending
            assert set(bound(admin, ns)) == first
            assert not job_status(admin, ns, "train").get("failed")
            config = tmp_path / "tenancy.yaml"
            config.write_text(TENANCY)
            args = ["explain", f"{ns}/b-0", "--config", str(config)]
            said = CliRunner().invoke(app, [*args, "--kubeconfig", str(live_cp.kubeconfig_path)])
            assert said.exit_code == 0, said.output
            assert "Next cycle: stays pending" in said.output
            # Nor does its forecast evict the Job: b starts when the Job ends, in an hour.
            assert "Predicted start:" in said.output and "(in 0s)" not in said.output
        finally:
            drop_jobs(admin, ns)


def test_a_job_preempted_without_the_rule_fails_whole(
    live_cp: ControlPlane, admin: KubeClient, ns: str, job_controller: None
) -> None:
    """An urgent pod of queue a needs half of the node the Job (``backoffLimit: 0``, no
    rule) holds: the Job is the only victim, so both of its pods go -- and the Job
    controller fails it, as one eviction alone would have: no replacement is made."""
    create_priority_classes(admin, {"lv-urgent": 1000})
    with scheduler(live_cp, tenancy=TENANCY):
        try:
            admin.post(JOBS.format(ns=ns), job("train", None))
            wait_for(lambda: len(bound(admin, ns)) == 2, timeout=30)
            urgent = pod(
                "urgent",
                gpus=4,
                labels={"fairgpu.io/queue": "a"},
                node_selector={"kubernetes.io/hostname": NODE},
            )
            urgent["spec"]["priorityClassName"] = "lv-urgent"
            create(admin, ns, urgent)
            wait_for(lambda: bound(admin, ns).get("urgent") == NODE, timeout=30)
            wait_for(lambda: job_condition(admin, ns, "train", "Failed"), timeout=60)
            names = {p["metadata"]["name"] for p in pods(admin, ns)}
            assert names == {"urgent"}
        finally:
            drop_jobs(admin, ns)


def b_pod() -> dict[str, Any]:
    """Queue b's 4-GPU pod for the A100 training node."""
    return pod(
        "b-0",
        gpus=4,
        labels={"fairgpu.io/queue": "b"},
        node_selector={"kubernetes.io/hostname": NODE},
    )


def unschedulable(admin: KubeClient, ns: str, name: str) -> bool:
    """Pod ``name`` was reported unschedulable (PodScheduled False)."""
    got = next((p for p in pods(admin, ns) if p["metadata"]["name"] == name), None)
    c = condition(got) if got is not None else None
    return c is not None and c["status"] == "False"


def job_status(admin: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return admin.get(f"{JOBS.format(ns=ns)}/{name}").get("status") or {}


def test_the_scheduler_spares_a_job_one_eviction_would_fail(
    live_cp: ControlPlane, admin: KubeClient, ns: str, job_controller: None
) -> None:
    """Job ``train`` (two 2-GPU pods, ``backoffLimit: 0``) and pod ``solo`` (3 GPUs) run;
    an urgent 2-GPU pod of the same queue needs room. One pod of the Job has run less
    GPU-time than ``solo`` -- but evicting it would fail the Job and lose both of its pods:
    the scheduler reads the Job and evicts ``solo``."""
    create_priority_classes(admin, {"lv-urgent": 1000})
    on_node = {"kubernetes.io/hostname": NODE}
    with scheduler(live_cp, tenancy=TENANCY) as s:
        try:
            admin.post(JOBS.format(ns=ns), job("train", None, gpus=2))
            labels = {"fairgpu.io/queue": "a"}
            create(admin, ns, pod("solo", gpus=3, labels=labels, node_selector=on_node))
            wait_for(lambda: len(bound(admin, ns)) == 3, timeout=30)
            wait_for(lambda: s.jobs.fragile(), timeout=30)  # the watch has seen the Job
            names = urgent_takes_room(admin, ns, labels)
            assert "solo" not in names
            assert not job_condition(admin, ns, "train", "Failed")
            running = [n for n in names if n.startswith("train-")]
            assert len(running) == 2
        finally:
            drop_jobs(admin, ns)


def test_answers_count_the_pods_a_job_is_still_to_create(
    live_cp: ControlPlane, admin: KubeClient, ns: str, job_controller: None, tmp_path: Path
) -> None:
    """Job ``train``: three completions of an 8-GPU pod, one at a time, an hour each, its
    pods at priority 100; pod ``eval`` of the same queue and user, priority 0, waits for
    the node. The Job controller has created one pod; the answers create the next two as it
    will: ``eval`` starts when the whole Job ends (about 3 h), not after its first pod;
    ``explain`` on the Job's pod says when the Job ends; ``queues`` counts its pods to come
    and drains after them."""
    create_priority_classes(admin, {"lv-job-high": 100})
    manifest = job("train", IGNORE_DISRUPTIONS, gpus=8)
    manifest["spec"].update(parallelism=1, completions=3)
    manifest["spec"]["template"]["spec"]["priorityClassName"] = "lv-job-high"
    config = tmp_path / "tenancy.yaml"
    config.write_text(TENANCY)

    def ask(*args: str) -> Any:
        return ask_cli(live_cp, config, *args)

    with scheduler(live_cp, tenancy=TENANCY):
        try:
            admin.post(JOBS.format(ns=ns), manifest)
            running = wait_for(lambda: next(iter(bound(admin, ns)), None), timeout=30)
            labels = {"fairgpu.io/queue": "a"}
            notes = {"fairgpu.io/duration-seconds": "600"}
            on_node = {"kubernetes.io/hostname": NODE}
            create(
                admin,
                ns,
                pod("eval", gpus=8, labels=labels, annotations=notes, node_selector=on_node),
            )
            wait_for(lambda: unschedulable(admin, ns, "eval"), timeout=30)

            three_hours = range(3 * 3600 - 300, 3 * 3600 + 1)
            mine = ask("explain", f"{ns}/{running}")
            assert mine["state"] == "bound", mine
            got = mine["job"]
            assert (got["job"], got["completions"], got["succeeded"]) == (f"{ns}/train", 3, 0)
            assert (got["pods_in_cluster"], got["pods_to_create"]) == (1, 2)
            assert got["predicted_end_in_seconds"] in three_hours, got

            waiting = ask("explain", f"{ns}/eval")
            assert waiting["predicted_in_seconds"] in three_hours, waiting
            assert "job" not in waiting  # not a Job's pod

            rows = {r["queue"]: r for r in ask("queues")}
            assert rows["a"]["pods_to_create"] == 2 and rows["a"]["drain_known"], rows["a"]

            (listed,) = ask("jobs", "-n", ns)
            assert (listed["job"], listed["queue"], listed["running"]) == (f"{ns}/train", "a", 1)
            assert listed["pods_to_create"] == 2
            assert listed["predicted_end_in_seconds"] in three_hours, listed
            assert listed["deadline"] is None and listed["predicted_failure"] is None

            # A deadline of 2.5 h, counted from the start the Job controller recorded,
            # comes before the third pod ends: the Job is predicted to fail then, and
            # ``eval`` to start when its pod is deleted.
            admin.patch(f"{JOBS.format(ns=ns)}/train", {"spec": {"activeDeadlineSeconds": 9000}})
            deadline = range(9000 - 300, 9000 + 1)
            (listed,) = ask("jobs", "-n", ns)
            failure = listed["predicted_failure"]
            assert failure is not None and failure["reason"] == "DeadlineExceeded", listed
            assert failure["in_seconds"] in deadline and failure["succeeded_by_then"] == 2
            assert listed["predicted_end"] is None and listed["deadline"] == failure["at"]
            assert ask("explain", f"{ns}/eval")["predicted_in_seconds"] in deadline
        finally:
            drop_jobs(admin, ns)


def test_a_jobset_child_job_one_eviction_fails_costs_the_whole_jobset(
    live_cp: ControlPlane, admin: KubeClient, ns: str, job_controller: None
) -> None:
    """Two Jobs as a JobSet's controller makes them (its label on their pods): the leader's
    (one 2-GPU pod, ``backoffLimit: 0``) and the workers' (two 2-GPU pods at priority 2 000,
    which the urgent pod may not preempt). ``solo`` (2 GPUs) ran longest. Alone, the leader
    is the cheaper victim; but its Job's failure would restart the whole JobSet, workers
    included -- so the scheduler reads the label and evicts ``solo``."""
    create_priority_classes(admin, {"lv-urgent": 1000, "lv-jobset-workers": 2000})
    on_node = {"kubernetes.io/hostname": NODE}
    labels = {"fairgpu.io/queue": "a"}
    with scheduler(live_cp, tenancy=TENANCY) as s:
        try:
            create(admin, ns, pod("solo", gpus=2, labels=labels, node_selector=on_node))
            wait_for(lambda: bound(admin, ns).get("solo") == NODE, timeout=30)
            time.sleep(2)  # solo has run longer than the JobSet's pods
            for name, count, limit, priority in (
                ("llm-leader-0", 1, 0, ""),
                ("llm-workers-0", 2, 6, "lv-jobset-workers"),
            ):
                manifest = job(name, None, gpus=2)
                spec = manifest["spec"]
                spec.update(parallelism=count, completions=count, backoffLimit=limit)
                meta = spec["template"]["metadata"]
                meta["labels"] = {**meta.get("labels", {}), "jobset.sigs.k8s.io/jobset-name": "llm"}
                if priority:
                    spec["template"]["spec"]["priorityClassName"] = priority
                admin.post(JOBS.format(ns=ns), manifest)
            wait_for(lambda: len(bound(admin, ns)) == 4, timeout=30)
            wait_for(lambda: s.jobs.fragile(), timeout=30)  # the leader's Job is fragile
            names = urgent_takes_room(admin, ns, labels)
            assert "solo" not in names
            assert not job_condition(admin, ns, "llm-leader-0", "Failed")
            assert sum(n.startswith("llm-") for n in names) == 3
        finally:
            drop_jobs(admin, ns)


def urgent_takes_room(admin: KubeClient, ns: str, labels: dict[str, str]) -> set[str]:
    """An urgent 2-GPU pod (``lv-urgent``) for the training node, once bound there: the
    names of the namespace's pods then (those evicted gone or going)."""
    urgent = pod("urgent", gpus=2, labels=labels, node_selector={"kubernetes.io/hostname": NODE})
    urgent["spec"]["priorityClassName"] = "lv-urgent"
    create(admin, ns, urgent)
    wait_for(lambda: bound(admin, ns).get("urgent") == NODE, timeout=30)
    return {p["metadata"]["name"] for p in pods(admin, ns)}
