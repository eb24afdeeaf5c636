"""Named placement policies (presets of :class:`~fairgpu.engine.profile.Profile`).

Each policy states its tie-break rule, because on real traces the tie-break alone moves GPU
allocation by several points.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fairgpu.engine.plugins import gpu_sharing as frag
from fairgpu.engine.profile import Profile, ScoreRef

_KUBE_SCORES = [
    ScoreRef(name="TaintToleration", weight=3),
    ScoreRef(name="NodeAffinity", weight=2),
    ScoreRef(name="InterPodAffinity", weight=2),
    ScoreRef(name="PodTopologySpread", weight=2),
    ScoreRef(name="ImageLocality", weight=1),
]
# The fragmentation policies weigh the workload's own preferences first; kube's cluster
# default spread constraints (every ReplicaSet pod spread over hostnames) would override
# packing there, so they score only the pod's own ScheduleAnyway constraints.
_SPREAD_OWN_ONLY = {"PodTopologySpread": {"default_constraints": "none"}}
# Ours pack first; among nodes that pack equally well (empty ones, for a large job), the one
# that has the pod's images (a GPU image is 10-20 GB to pull) before the fixed rank.
_PACKING_TIES = ("ImageLocality",)


def spread() -> Profile:
    """kube-scheduler's default scoring: LeastAllocated + balanced allocation, random ties."""
    return Profile(
        name="spread",
        scores=[
            *_KUBE_SCORES,
            ScoreRef(name="NodeResourcesFit", weight=1),
            ScoreRef(name="NodeResourcesBalancedAllocation", weight=1),
        ],
        device_policy="spread",
        tie_break="random",
    )


def binpack() -> Profile:
    """MostAllocated on cpu, memory and GPU compute; tightest GPU device; fixed-rank ties."""
    return Profile(
        name="binpack",
        scores=[*_KUBE_SCORES, ScoreRef(name="NodeResourcesFit", weight=5)],
        plugin_args={
            "NodeResourcesFit": {
                "strategy": "MostAllocated",
                "resources": [
                    {"name": "nvidia.com/gpu", "weight": 4},
                    {"name": "cpu", "weight": 1},
                    {"name": "memory", "weight": 1},
                ],
            }
        },
        device_policy="best-fit",
        tie_break="fixed-rank",
    )


def _single(name: str, score: str, device: str, tie_break: str = "fixed-rank") -> Profile:
    """One GPU score plugin, as in the published experiments (no other scores)."""
    return Profile(
        name=name,
        scores=[ScoreRef(name=score, weight=1)],
        device_policy=device,
        tie_break=tie_break,  # type: ignore[arg-type]
    )


def best_fit() -> Profile:
    """BestFit (published): least CPU + GPU left after placement; tightest device; fixed-rank
    ties."""
    return _single("best-fit", frag.GpuBestFitScore.name, "best-fit")


def dot_product() -> Profile:
    """Tetris dot-product of free and asked CPU/GPU; tightest device; fixed-rank ties."""
    return _single("dot-product", frag.DotProductScore.name, "best-fit")


def gpu_packing() -> Profile:
    """GPU packing: partly used devices, then used nodes, then idle nodes; tightest device;
    fixed-rank ties."""
    return _single("gpu-packing", frag.GpuPackingScore.name, "best-fit")


def gpu_clustering() -> Profile:
    """GPU clustering: keep pods of one GPU shape together; tightest device; fixed-rank ties."""
    return _single("gpu-clustering", frag.GpuClusteringScore.name, "best-fit")


def random_policy() -> Profile:
    """A uniformly random feasible node and a random device with room (seeded); no ties."""
    return _single("random", frag.RandomScore.name, "random", tie_break="random")


def fgd() -> Profile:
    """FGD as published (USENIX ATC'23): truncated sigmoid of the fragmentation decrease,
    device with the best score, fixed-rank ties. Typical pods are learned online from the pods
    seen unless ``plugin_args.FGD.typical_pods`` is set (see :func:`with_typical_pods`)."""
    return _single("fgd", frag.FgdScore.name, frag.DeviceFgd.name)


def fairgpu_frag() -> Profile:
    """Ours: the workload's preferences first (preferred node affinity -- e.g. a node pool --,
    PreferNoSchedule taints, preferred pod affinity: weight 1000 each, so they dominate), then
    the smallest exact increase of expected fragmentation measured by packing capacity
    (:func:`~fairgpu.engine.plugins.capacity_measure.capacity_fragmentation`), with the device
    chosen jointly with the node; among ties, the node with the pod's images, then the fixed
    rank. Without preferences (the openb traces) the
    preference scores are equal on every node and only fragmentation decides."""
    return Profile(
        name="fairgpu-frag",
        scores=[
            ScoreRef(name="TaintToleration", weight=1000),
            ScoreRef(name="NodeAffinity", weight=1000),
            ScoreRef(name="InterPodAffinity", weight=1000),
            ScoreRef(name="PodTopologySpread", weight=1000),
            ScoreRef(name=frag.FragmentationScore.name, weight=1),
        ],
        plugin_args=dict(_SPREAD_OWN_ONLY),
        device_policy=frag.DeviceFragmentation.name,
        tie_break="fixed-rank",
        tie_scores=list(_PACKING_TIES),
    )


def _lexicographic(name: str, **extra: Any) -> Profile:
    args = {"lead": "fgd", "use_memory": True, "capacity_shapes": "all", "scarcity": 3, **extra}
    return Profile(
        name=name,
        scores=[
            ScoreRef(name="TaintToleration", weight=1000),
            ScoreRef(name="NodeAffinity", weight=1000),
            ScoreRef(name="InterPodAffinity", weight=1000),
            ScoreRef(name="PodTopologySpread", weight=1000),
            ScoreRef(name=frag.FragmentationScore.name, weight=1),
        ],
        plugin_args={frag.FragmentationScore.name: dict(args), **_SPREAD_OWN_ONLY},
        device_policy=frag.DeviceFragmentation.name,
        device_policy_args=dict(args),
        tie_break="fixed-rank",
        tie_scores=list(_PACKING_TIES),
    )


def fairgpu_frag_lex() -> Profile:
    """Ours, lexicographic: the workload's preferences first (as :func:`fairgpu_frag`), then
    FGD's truncated score (the expected-fragmentation decrease through a sigmoid, 0..100),
    then, among FGD's ties, the smallest exact increase of packing-capacity fragmentation
    (:func:`~fairgpu.engine.plugins.capacity_measure.capacity_fragmentation`), then the fixed
    rank. FGD's coarse score decides whether a placement breaks a typical shape's fit; the
    capacity measure orders the many ties (most decisions) by how many further copies of
    the workload's shapes still fit -- limited by free GPU milli, CPU and memory (the shapes'
    mean memory) --, instead of leaving them all to the node order. The capacity measure
    counts every shape of the workload (not only the 95% most frequent ones FGD uses), each
    weighted by its frequency times the cube of its GPU models' scarcity (all GPUs / GPUs it
    may use), so pods that could run anywhere leave scarce models to the pods pinned to
    them. The device is chosen jointly with the node."""
    return _lexicographic("fairgpu-frag-lex")


def fairgpu_frag_gaps() -> Profile:
    """:func:`fairgpu_frag_lex`, except that a pod sharing a GPU orders FGD's ties by the
    capacity of the model-pinned shapes only, then by the sum-of-squares gap balance of online
    bin packing (take a free-milli size many devices share, leave one few do). It packs
    shares tighter where they are a large part of the demand (openb default, cpu050,
    gpushare40) and loses a little where multi-GPU or model-pinned pods dominate
    (multigpu30, gpuspec33): see benchmarks/gpu_allocation."""
    return _lexicographic("fairgpu-frag-gaps", sharing_ties="gap-balance")


def fairgpu_frag_plan() -> Profile:
    """:func:`fairgpu_frag_gaps` under a packing plan: a GPU share goes first to a partly used
    GPU whose shares plus this one are part of an optimal packing of the workload's share
    sizes (the LP relaxation of bin packing, solved for the typical shapes), then to an idle
    GPU, and only then anywhere else; FGD's score and the gap-balance order decide within
    each tier. One-step fragmentation scores cannot see which partner completes a GPU (a 230
    next to a 550 leaves room for a 220; next to a 650 it takes the hole a 320 fills); the plan
    does. See :mod:`fairgpu.engine.plugins.packing_plan` and benchmarks/gpu_allocation."""
    return _lexicographic("fairgpu-frag-plan", sharing_ties="gap-balance", packing_plan=True)


# Score plugins / device policies that read the workload's typical pod shapes.
_TYPICAL_SCORES = (frag.FgdScore.name, frag.FragmentationScore.name)
_TYPICAL_DEVICES = {
    frag.DeviceFgd.name: frag.FgdScore.name,
    frag.DeviceFragmentation.name: frag.FragmentationScore.name,
}


def with_typical_pods(profile: Profile, typical: list[dict[str, Any]]) -> Profile:
    """A copy of ``profile`` whose fragmentation plugins use the given typical shapes
    (``TypicalPods.to_args()``) instead of learning them online."""
    out = profile.model_copy(deep=True)
    for ref in out.scores:
        if ref.name in _TYPICAL_SCORES:
            out.plugin_args.setdefault(ref.name, {})["typical_pods"] = typical
    if out.device_policy in _TYPICAL_DEVICES:
        out.device_policy_args = {**out.device_policy_args, "typical_pods": typical}
    return out


POLICIES: dict[str, Callable[[], Profile]] = {
    "spread": spread,
    "kube-default": spread,
    "binpack": binpack,
    "best-fit": best_fit,
    "dot-product": dot_product,
    "gpu-packing": gpu_packing,
    "gpu-clustering": gpu_clustering,
    "random": random_policy,
    "fgd": fgd,
    "fairgpu-frag": fairgpu_frag,
    "fairgpu-frag-lex": fairgpu_frag_lex,
    "fairgpu-frag-gaps": fairgpu_frag_gaps,
    "fairgpu-frag-plan": fairgpu_frag_plan,
}

# The policies compared on the openb traces (benchmarks/gpu_allocation), baselines first.
GPU_SHARING_POLICIES = (
    "random",
    "dot-product",
    "gpu-clustering",
    "gpu-packing",
    "best-fit",
    "fgd",
    "fairgpu-frag",
    "fairgpu-frag-lex",
    "fairgpu-frag-gaps",
    "fairgpu-frag-plan",
)

# Measured best on the openb traces (benchmarks/gpu_allocation).
DEFAULT_POLICY = "fairgpu-frag-plan"


def policy(name: str) -> Profile:
    """The profile for a named policy; raises ``ValueError`` listing the known names."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
    return factory()
