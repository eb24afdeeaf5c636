"""Plugin registry: configuration names -> plugin factories, as a value passed to the scheduler.

:func:`default_registry` returns a fresh :class:`Registry` holding every built-in plugin and
device policy. A user adds a policy either by naming ``"package.module:ClassName"`` in the
profile (imported on demand), or by registering a short name on a registry and passing it in::

    reg = default_registry()
    reg.register("DiskTypeSsd", DiskTypeSsd)
    Scheduler(profile, registry=reg)

Nothing registers itself by being imported, and a name can be registered only once per
registry (a second registration is an error, never a silent override).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from fairgpu.engine.framework import Plugin
from fairgpu.engine.plugins import gpu_sharing as frag
from fairgpu.engine.plugins.dra_packing import DynamicResourcesPacking
from fairgpu.engine.plugins.dynamic_resources import DynamicResources
from fairgpu.engine.plugins.gpu import (
    DeviceBestFit,
    DeviceRandom,
    DeviceSpread,
    GpuFit,
    GpuModel,
    GpuRequestCheck,
)
from fairgpu.engine.plugins.image_locality import ImageLocality
from fairgpu.engine.plugins.inter_pod_affinity import InterPodAffinity
from fairgpu.engine.plugins.node_affinity import NodeAffinity
from fairgpu.engine.plugins.node_name import NodeName
from fairgpu.engine.plugins.node_ports import NodePorts
from fairgpu.engine.plugins.node_resources import BalancedAllocation, NodeResourcesFit
from fairgpu.engine.plugins.node_unschedulable import NodeUnschedulable
from fairgpu.engine.plugins.pod_topology_spread import PodTopologySpread
from fairgpu.engine.plugins.scheduling_gates import SchedulingGates
from fairgpu.engine.plugins.storage import STORAGE_PLUGINS
from fairgpu.engine.plugins.taint_toleration import TaintToleration

PluginFactory = Callable[..., Plugin]

BUILTIN_PLUGINS: tuple[type[Plugin], ...] = (
    NodeUnschedulable,
    NodeName,
    NodeAffinity,
    TaintToleration,
    NodeResourcesFit,
    BalancedAllocation,
    GpuRequestCheck,
    GpuModel,
    GpuFit,
    InterPodAffinity,
    ImageLocality,
    SchedulingGates,
    NodePorts,
    PodTopologySpread,
    *STORAGE_PLUGINS,
    DynamicResources,
    DynamicResourcesPacking,
    *frag.SCORE_PLUGINS,
)
BUILTIN_DEVICE_POLICIES: tuple[type[Plugin], ...] = (
    DeviceBestFit,
    DeviceSpread,
    DeviceRandom,
    *frag.DEVICE_POLICIES,
)


class Registry:
    """Plugin and device-policy factories by name (two separate name spaces)."""

    def __init__(self) -> None:
        self._tables: dict[bool, dict[str, PluginFactory]] = {False: {}, True: {}}

    def register(self, name: str, factory: PluginFactory, *, device_policy: bool = False) -> None:
        """Make ``factory`` available under ``name``; a name already taken is a ``ValueError``."""
        table = self._tables[device_policy]
        if name in table:
            kind = "device policy" if device_policy else "plugin"
            raise ValueError(f"{kind} {name!r} is already registered")
        table[name] = factory

    def names(self, *, device_policy: bool = False) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._tables[device_policy])

    def build(
        self, name: str, args: dict[str, Any] | None = None, *, device_policy: bool = False
    ) -> Plugin:
        """Instantiate ``name`` (a registered name or ``module:Class``) with ``args``."""
        table = self._tables[device_policy]
        factory = table.get(name) or (_import(name) if ":" in name else None)
        if factory is None:
            kind = "device policy" if device_policy else "plugin"
            raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(sorted(table))}")
        try:
            return factory(**(args or {}))
        except TypeError as error:
            raise ValueError(f"plugin {name!r}: bad arguments {args!r}: {error}") from None


def default_registry() -> Registry:
    """A new registry holding every built-in plugin and device policy."""
    reg = Registry()
    for cls in BUILTIN_PLUGINS:
        reg.register(cls.name, cls)
    for cls in BUILTIN_DEVICE_POLICIES:
        reg.register(cls.name, cls, device_policy=True)
    return reg


def _import(path: str) -> PluginFactory:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attr)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"plugin {path!r} cannot be imported: {error}") from None
    if not callable(factory):
        raise ValueError(f"plugin {path!r} is not a class or factory")
    return factory  # type: ignore[no-any-return]
