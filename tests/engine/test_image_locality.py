"""ImageLocality scores as kube-scheduler 1.34's (fairgpu.engine.plugins.image_locality),
and node images decoded so that a malformed entry never costs the node."""

from __future__ import annotations

import numpy as np

from fairgpu.api.objects import Node, decode
from fairgpu.engine.engine import Engine
from fairgpu.engine.framework import CycleState
from fairgpu.engine.plugins.image_locality import MB, ImageLocality
from fairgpu.engine.policies import policy, with_typical_pods
from fairgpu.model.node import NodeImage, node_from_k8s
from fairgpu.model.pod import normalized_image_name
from tests.builders import cluster, node_info, pod_info

GB = 1000 * MB
TRAIN = "registry.example/train:v1"
BASE = "registry.example/cuda:12"


def imaged(name: str, *images: tuple[str, int]) -> object:
    node = node_info(name, gpus=8)
    node.images = tuple(NodeImage((n,), size) for n, size in images)
    return node


def scores(state: object, *images: str) -> list[int]:
    pod = pod_info("p", gpus=1, images=tuple(images))
    nodes = np.arange(state.size)  # type: ignore[attr-defined]
    return ImageLocality().score(CycleState(), pod, state, nodes).tolist()  # type: ignore[arg-type]


def test_an_image_on_half_the_nodes_counts_half_its_size() -> None:
    state = cluster(
        imaged("a", (TRAIN, 10 * GB)),
        imaged("b", (TRAIN, 10 * GB), (BASE, 600 * MB)),
        imaged("c", (BASE, 600 * MB)),
        imaged("d"),
    )
    # TRAIN: 10 GB x 2/4 = 5 GB, past the 1000 MiB cap of one container: 100.
    assert scores(state, TRAIN) == [100, 100, 0, 0]
    # BASE: 600 MB x 2/4 = 300 MB; 100 x (300 MB - 23 MiB) // (1000 MiB - 23 MiB).
    expected = 100 * (300 * MB - 23 * MB) // (1000 * MB - 23 * MB)
    assert scores(state, BASE) == [0, expected, expected, 0]
    # Two containers: the sums add, and the cap doubles -- 5 GB alone reaches it, 300 MB
    # alone scores on the doubled scale.
    alone = 100 * (300 * MB - 23 * MB) // (2000 * MB - 23 * MB)
    assert scores(state, TRAIN, BASE) == [100, 100, alone, 0]


def test_small_or_rare_images_score_nothing() -> None:
    state = cluster(imaged("a", ("tiny:1", 20 * MB)), imaged("b"), imaged("c"), imaged("d"))
    assert scores(state, "tiny:1") == [0, 0, 0, 0]  # under 23 MiB after the spread


def test_image_names_match_as_kube_normalizes_them() -> None:
    assert normalized_image_name("registry.example/train") == "registry.example/train:latest"
    assert normalized_image_name("localhost:5000/train") == "localhost:5000/train:latest"
    assert normalized_image_name("train:v1") == "train:v1"
    assert normalized_image_name("train@sha256:ab") == "train@sha256:ab"
    state = cluster(imaged("a", ("registry.example/train:latest", 4 * GB)), imaged("b"))
    pod = pod_info("p", gpus=1, images=(normalized_image_name("registry.example/train"),))
    assert ImageLocality().score(CycleState(), pod, state, np.arange(2)).tolist() == [100, 0]


def test_the_spread_policy_places_a_pod_where_its_image_is() -> None:
    pod = pod_info("p", gpus=1, images=(TRAIN,))
    for seed in range(5):  # ties are broken at random: the image decides, not the draw
        state = cluster(imaged("a"), imaged("b", (TRAIN, 15 * GB)), imaged("c"), imaged("d"))
        result = Engine(policy("spread"), seed).cycle(state, [pod], 0.0)
        assert [b.node_name for b in result.binds] == ["b"]


def test_node_images_are_decoded_and_a_malformed_entry_is_left_out() -> None:
    raw = {
        "metadata": {"name": "n1"},
        "status": {
            "allocatable": {"cpu": "8", "nvidia.com/gpu": "8"},
            "images": [
                {"names": [TRAIN, "registry.example/train@sha256:ab"], "sizeBytes": 10_000},
                {"names": "not-a-list", "sizeBytes": 1},
                {"names": [BASE], "sizeBytes": "large"},
            ],
        },
    }
    node = node_from_k8s(decode(raw, Node))
    assert node.images == (NodeImage((TRAIN, "registry.example/train@sha256:ab"), 10_000),)
    assert node.gpu_count == 8  # the node is kept
    assert [p.field for p in node.problems] == ["status.images[1]", "status.images[2]"]


def test_the_packing_policies_use_images_only_among_nodes_that_pack_alike() -> None:
    pod = pod_info("p", gpus=1, images=(TRAIN,))
    # Half the workload is whole 8-GPU pods: a one-GPU pod on an empty node breaks a slot.
    typical = [
        {"cpu": 1000, "milli": 1000, "count": 1, "models": "", "weight": 0.5},
        {"cpu": 1000, "milli": 1000, "count": 8, "models": "", "weight": 0.5},
    ]
    for name in ("fairgpu-frag", "fairgpu-frag-plan"):
        profile = with_typical_pods(policy(name), typical)
        # Empty nodes pack alike: the one that has the image.
        state = cluster(imaged("a"), imaged("b", (TRAIN, 15 * GB)), imaged("c"))
        result = Engine(profile).cycle(state, [pod], 0.0)
        assert [b.node_name for b in result.binds] == ["b"], name
        # A node with one GPU left packs better than an empty node with the image.
        busy = pod_info("busy", gpus=7)
        state = cluster(imaged("a"), imaged("b", (TRAIN, 15 * GB)), placed=[(busy, "a")])
        result = Engine(profile).cycle(state, [pod], 0.0)
        assert [b.node_name for b in result.binds] == ["a"], name


def test_the_image_index_follows_nodes_added_changed_and_removed() -> None:
    state = cluster(imaged("a", (TRAIN, 8 * GB)), imaged("b"))
    version = state.static_version
    state.set_node_images("b", (NodeImage((TRAIN,), 9 * GB),))
    assert state.static_version == version  # no filter reads images: masks stay valid
    # On both nodes: 8 GB (the first node's size) x 2/2.
    assert state.images.spread_size(TRAIN)[0] == 8 * GB  # type: ignore[index]
    state.remove_node("a")
    assert state.images.total_nodes == 1
    # Only b has it now: the size first reported stays while any node has the name (as in
    # kube-scheduler's cache), on b's slot.
    size, slots = state.images.spread_size(TRAIN)  # type: ignore[misc]
    assert size == 8 * GB and slots.tolist() == [state.node_index["b"]]
    state.set_node_images("b", ())
    assert state.images.spread_size(TRAIN) is None and not state.images
    state.add_node(imaged("a", (TRAIN, 1 * GB)))  # registered again
    assert state.images.total_nodes == 2 and state.images.spread_size(TRAIN)[0] == GB // 2  # type: ignore[index]
