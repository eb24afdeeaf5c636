"""Image locality against a real kube-apiserver: of nodes that pack a job equally well, the
live scheduler binds it to the one whose kubelet reports the job's image -- and follows the
image when another node reports it instead (a Node status update)."""

from __future__ import annotations

from fairgpu.devcluster import (
    ControlPlane,
    FakeKubelet,
    KubeClient,
    NodeSpec,
    create_nodes,
    delete_nodes,
)
from tests.live.live_helpers import (
    A100,
    DOMAIN,
    bound,
    create,
    delete_pods,
    pod,
    scheduler,
    wait_for,
)

IMAGE = "registry.example/train:v7"


def test_a_job_goes_to_the_node_that_has_its_image(
    live_cp: ControlPlane, admin: KubeClient, kubelet: FakeKubelet, ns: str
) -> None:
    specs = [
        NodeSpec(f"{ns}-img-{i}", pool="training", gpu_model=A100, gpus=8, labels={"t": ns})
        for i in range(3)
    ]
    create_nodes(admin, specs, domain=DOMAIN)
    try:
        with scheduler(live_cp):
            # Each node in turn has pulled the image: an 8-GPU job fits each of them alike.
            for i, spec in enumerate(specs):
                for other in specs:
                    images = [{"names": [IMAGE], "sizeBytes": 15 * 10**9}] if other is spec else []
                    admin.patch(
                        f"/api/v1/nodes/{other.name}/status", {"status": {"images": images}}
                    )
                job = pod(f"job-{i}", gpus=8, node_selector={"t": ns})
                job["spec"]["containers"][0]["image"] = IMAGE
                create(admin, ns, job)
                wait_for(lambda n=f"job-{i}": n in bound(admin, ns))
                assert bound(admin, ns)[f"job-{i}"] == spec.name
                delete_pods(admin, ns)
    finally:
        delete_nodes(admin, [s.name for s in specs])
