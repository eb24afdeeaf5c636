"""PodGroup objects (coscheduling, Volcano): decoding, merging, and gangs sized by them
through a real kube-apiserver with the PodGroup CRD installed."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from live_helpers import (
    bound,
    condition,
    create,
    create_pod_group,
    install_podgroup_crd,
    pod,
    pods,
    scheduler,
    wait_for,
)

from fairgpu.devcluster import ControlPlane, KubeClient
from fairgpu.devcluster.kubelet import DURATION_ANNOTATION
from fairgpu.kube.podgroups import PodGroupBook, PodGroupObject, decode_pod_group
from fairgpu.model.gpu import ANN_GPU_DEVICES, WHOLE, encode_gpu_devices
from fairgpu.tenancy.resolve import LABEL_POD_GROUP

COSCHEDULING = "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1/podgroups"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def group_json(name: str, min_member: Any, namespace: str = "ns") -> bytes:
    return msgspec.json.encode(
        {"metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": min_member}}
    )


def test_decode_pod_group_names_the_bad_field() -> None:
    assert decode_pod_group(group_json("g", 4)) == PodGroupObject("ns/g", 4)
    for bad in ("4", 0, -1, None, 2.5, True):
        got = decode_pod_group(group_json("g", bad))
        assert got.error is not None and "PodGroup ns/g: spec.minMember" in got.error


@given(st.one_of(st.integers(), st.text(), st.none(), st.floats(), st.booleans()))
def test_decode_pod_group_never_raises_on_a_bad_min_member(value: Any) -> None:
    got = decode_pod_group(group_json("g", value))
    assert (got.error is None) == (
        isinstance(value, int) and not isinstance(value, bool) and value >= 1
    )


def test_book_merges_apis_and_reports_changes() -> None:
    book = PodGroupBook()
    a, b = PodGroupObject("ns/a", 2), PodGroupObject("ns/b", 3)
    assert book.apply(COSCHEDULING, "SYNC", [a, b]) == {"ns/a": a, "ns/b": b}
    assert book.apply(VOLCANO, "SYNC", []) == {}
    bigger = PodGroupObject("ns/a", 5)
    assert book.apply(COSCHEDULING, "MODIFIED", bigger) == {"ns/a": bigger}
    assert book.apply(COSCHEDULING, "MODIFIED", bigger) == {}
    # A relist that no longer has b: b is gone.
    assert book.apply(COSCHEDULING, "SYNC", [bigger]) == {"ns/b": None}
    assert book.apply(COSCHEDULING, "DELETED", bigger) == {"ns/a": None}
    assert book.merged == {}


# ---- through the real API server -----------------------------------------------------------
def _member(name: str, group: str) -> dict[str, Any]:
    return pod(name, gpus=2, labels={GROUP_LABEL: group})


def _reason(admin: KubeClient, ns: str, name: str) -> str | None:
    p = next((p for p in pods(admin, ns) if p["metadata"]["name"] == name), None)
    c = condition(p) if p is not None else None
    return c["message"] if c and c["status"] == "False" else None


@pytest.mark.integration
def test_gang_size_comes_from_the_pod_group_object(
    live_cp: ControlPlane, admin: KubeClient, ns: str, podgroup_crd: None
) -> None:
    create_pod_group(admin, "scheduling.x-k8s.io", "v1alpha1", ns, "trainer", 3)
    create_pod_group(admin, "scheduling.x-k8s.io", "v1alpha1", ns, "broken", 0)
    for i in range(2):
        create(admin, ns, _member(f"trainer-{i}", "trainer"))
    create(admin, ns, _member("broken-0", "broken"))
    with scheduler(live_cp) as s:
        # Two of three members: the group waits, and says why.
        msg = wait_for(lambda: _reason(admin, ns, "trainer-0"))
        assert "trainer" in msg and "3" in msg, msg
        bad = wait_for(lambda: _reason(admin, ns, "broken-0"))
        assert "spec.minMember" in bad and "broken" in bad, bad
        time.sleep(1.0)
        assert not bound(admin, ns)
        # The third member arrives: the whole group is bound together.
        create(admin, ns, _member("trainer-2", "trainer"))
        wait_for(lambda: {f"trainer-{i}" for i in range(3)} <= set(bound(admin, ns)))
        assert s.engine.resolver.pod_groups[f"{ns}/trainer"] == 3
    assert "broken-0" not in bound(admin, ns)


@pytest.mark.integration
def test_a_pod_group_crd_installed_later_is_picked_up(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # Volcano names the group in an annotation; its PodGroup API is not served yet.
    members = [
        pod(f"volc-{i}", gpus=1, annotations={"scheduling.k8s.io/group-name": "volc"})
        for i in range(2)
    ]
    for m in members:
        create(admin, ns, m)
    with scheduler(live_cp, podgroup_discovery_seconds=0.5) as s:
        msg = wait_for(lambda: _reason(admin, ns, "volc-0"))
        assert "minMember unknown" in msg, msg
        install_podgroup_crd(admin, "scheduling.volcano.sh", "v1beta1")
        create_pod_group(admin, "scheduling.volcano.sh", "v1beta1", ns, "volc", 2)
        wait_for(lambda: {"volc-0", "volc-1"} <= set(bound(admin, ns)))
        assert VOLCANO in [r.path for r in s.pod_group_reflectors]


@pytest.mark.integration
def test_a_member_left_pending_starts_after_its_siblings_ran_to_completion(
    live_cp: ControlPlane, admin: KubeClient, ns: str
) -> None:
    # A scheduler stopped between two binds of one gang (killed, or the API server went away
    # mid-request): two of three members are bound, run and finish. The third must still
    # start -- members that ran to completion count toward minMember -- not wait for good for
    # siblings that will never run again.
    ann = {"fairgpu.io/min-member": "3", DURATION_ANNOTATION: "1"}
    for i in range(3):
        create(admin, ns, pod(f"g-{i}", gpus=1, labels={LABEL_POD_GROUP: "g"}, annotations=ann))
    for i in range(2):
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": f"g-{i}",
                "annotations": {ANN_GPU_DEVICES: encode_gpu_devices((7 - i,), WHOLE, 0)},
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": "lv-training-a100"},
        }
        admin.post(f"/api/v1/namespaces/{ns}/pods/g-{i}/binding", binding)

    def succeeded() -> set[str]:
        done = [p for p in pods(admin, ns) if p["status"].get("phase") == "Succeeded"]
        return {p["metadata"]["name"] for p in done}

    wait_for(lambda: succeeded() == {"g-0", "g-1"})
    with scheduler(live_cp):
        wait_for(lambda: "g-2" in bound(admin, ns), 20)
        wait_for(lambda: succeeded() == {"g-0", "g-1", "g-2"}, 20)
