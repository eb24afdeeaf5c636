"""The user-plugin path: ``module:Class`` names in a profile and a registry passed in."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairgpu.engine.registry import default_registry
from fairgpu.engine.scheduler import Scheduler
from tests.builders import cluster, k8s_node, k8s_pod
from tests.engine.profiles import profile

HERE = Path(__file__).parent
EXAMPLES = HERE.parents[1] / "examples" / "plugins"


@pytest.fixture
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put this directory and examples/plugins on sys.path, as a user's PYTHONPATH would."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.fixture
def disks() -> object:
    return cluster(
        k8s_node("ssd-1", labels={"disktype": "ssd", "rack": "r2"}),
        k8s_node("hdd-1", labels={"disktype": "hdd", "rack": "r1"}),
        k8s_node("ssd-2", labels={"disktype": "ssd", "rack": "r1"}),
        k8s_node("plain", labels={"rack": "r1"}),
    )


FILTERS = ["NodeUnschedulable", "NodeResourcesFit"]


@pytest.mark.parametrize(
    "name",
    ["plugins_example:DiskTypeSsd", "disktype_ssd:DiskTypeSsd"],
    ids=["test-module", "examples-plugins"],
)
def test_module_class_name_in_profile(importable: None, disks: object, name: str) -> None:
    sched = Scheduler(profile([*FILTERS, name], {"NodeResourcesFit": 1}), seed=1)
    chosen = {sched.schedule(k8s_pod(f"p{i}"), disks).node_name for i in range(20)}
    assert chosen == {"ssd-1", "ssd-2"}


def test_user_score_plugin_with_arguments(importable: None, disks: object) -> None:
    prof = profile(
        [*FILTERS, "disktype_ssd:DiskTypeSsd"],
        {"plugins_example:PreferRack": 1},
        plugin_args={"plugins_example:PreferRack": {"rack": "r1"}},
    )
    assert Scheduler(prof).schedule(k8s_pod(), disks).node_name == "ssd-2"


def test_example_plugin_arguments_and_reason(importable: None, disks: object) -> None:
    prof = profile(
        [*FILTERS, "disktype_ssd:DiskTypeSsd"],
        plugin_args={"disktype_ssd:DiskTypeSsd": {"value": "nvme"}},
    )
    result = Scheduler(prof).schedule(k8s_pod(), disks)
    assert result.reason() == "0/4 nodes are available: 4 node(s) not labelled disktype=nvme."


def test_registered_short_name(importable: None, disks: object) -> None:
    from plugins_example import DiskTypeSsd

    reg = default_registry()
    reg.register("DiskTypeSsd", DiskTypeSsd)
    sched = Scheduler(profile([*FILTERS, "DiskTypeSsd"]), seed=0, registry=reg)
    result = sched.schedule(k8s_pod(), disks)
    assert result.node_name in {"ssd-1", "ssd-2"}
    # A plain mask without reasons is still explained, by the plugin's name.
    prof = profile(["NodeName", "DiskTypeSsd"])
    none = Scheduler(prof, registry=reg).schedule(k8s_pod(nodeName="hdd-1"), disks)
    assert none.reason() == (
        "0/4 nodes are available: 1 node(s) rejected by DiskTypeSsd, "
        "3 node(s) didn't match the requested node name."
    )


def test_static_user_filter_is_cached_per_pod_shape(importable: None, disks: object) -> None:
    calls = 0
    from plugins_example import DiskTypeSsd

    class Counting(DiskTypeSsd):
        def filter(self, cycle, pod, cluster):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            return super().filter(cycle, pod, cluster)

    reg = default_registry()
    reg.register("CountingSsd", Counting)
    sched = Scheduler(profile(["CountingSsd"]), registry=reg)
    for i in range(5):
        sched.schedule(k8s_pod(f"p{i}"), disks)
    assert calls == 1
    disks.add_node(k8s_node("ssd-3", labels={"disktype": "ssd"}))  # type: ignore[attr-defined]
    sched.schedule(k8s_pod("q"), disks)
    assert calls == 2


def test_a_registered_name_is_not_global() -> None:
    from plugins_example import DiskTypeSsd

    default_registry().register("DiskTypeSsd", DiskTypeSsd)
    with pytest.raises(ValueError, match="unknown plugin 'DiskTypeSsd'"):
        Scheduler(profile(["DiskTypeSsd"]))


def test_duplicate_name_is_an_error(importable: None) -> None:
    from plugins_example import DiskTypeSsd

    reg = default_registry()
    with pytest.raises(ValueError, match="plugin 'NodeName' is already registered"):
        reg.register("NodeName", DiskTypeSsd)
    reg.register("DiskTypeSsd", DiskTypeSsd)
    with pytest.raises(ValueError, match="'DiskTypeSsd' is already registered"):
        reg.register("DiskTypeSsd", DiskTypeSsd)


def test_fragmentation_plugins_need_no_policies_import() -> None:
    """Built-in fragmentation plugins are in the default registry: no import side effect."""
    import subprocess
    import sys

    code = (
        "from fairgpu.engine.profile import Profile, ScoreRef\n"
        "from fairgpu.engine.scheduler import Scheduler\n"
        "import sys\n"
        "Scheduler(Profile(scores=[ScoreRef(name='FGD')], device_policy='fgd'))\n"
        "assert 'fairgpu.engine.policies' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_lifecycle_hooks_are_called(importable: None, disks: object) -> None:
    from plugins_example import PreferRack

    seen: list[str] = []

    class Recording(PreferRack):
        def on_cluster_change(self, cluster):  # type: ignore[no-untyped-def]
            seen.append("change")

        def reset(self) -> None:
            seen.append("reset")

        def observe(self, pod):  # type: ignore[no-untyped-def]
            seen.append(f"observe {pod.name}")

    reg = default_registry()
    reg.register("Recording", Recording)
    sched = Scheduler(profile(FILTERS, {"Recording": 1}), registry=reg)
    sched.schedule(k8s_pod("a"), disks)
    sched.schedule(k8s_pod("b"), disks)
    assert seen == ["change", "reset", "observe a", "observe b"]
    disks.add_node(k8s_node("ssd-3", labels={"disktype": "ssd"}))  # type: ignore[attr-defined]
    sched.schedule(k8s_pod("c"), disks)
    assert seen[4:] == ["change", "reset", "observe c"]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("plugins_example:Missing", "cannot be imported"),
        ("no_such_module_xyz:Plugin", "cannot be imported"),
        ("plugins_example:NotAPlugin", "is not a FilterPlugin"),
        ("plugins_example:PreferRack", "is not a FilterPlugin"),
        ("NoSuchPlugin", "unknown plugin 'NoSuchPlugin'; known: "),
    ],
    ids=["missing-class", "missing-module", "not-a-plugin", "wrong-kind", "unknown-name"],
)
def test_bad_plugin_names_are_clear_errors(importable: None, name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scheduler(profile([name]))


def test_bad_plugin_arguments_are_clear_errors(importable: None) -> None:
    prof = profile(["disktype_ssd:DiskTypeSsd"], plugin_args={"disktype_ssd:DiskTypeSsd": {"x": 1}})
    with pytest.raises(ValueError, match="bad arguments"):
        Scheduler(prof)


def test_raising_plugin_fails_only_that_pod(importable: None) -> None:
    from fairgpu.engine.framework import Code

    result = Scheduler(profile(["plugins_example:Broken"])).schedule(
        k8s_pod(), cluster(k8s_node("a"))
    )
    assert result.code == Code.ERROR
    assert "boom" in result.reason()
