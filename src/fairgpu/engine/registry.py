"""Plugin registry: configuration names -> plugin factories.

Users add their own policy by naming ``"package.module:ClassName"`` in the profile, or by calling
:func:`register` before building a :class:`~fairgpu.engine.scheduler.Scheduler`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from fairgpu.engine.framework import Plugin
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
from fairgpu.engine.plugins.inter_pod_affinity import InterPodAffinity
from fairgpu.engine.plugins.node_affinity import NodeAffinity
from fairgpu.engine.plugins.node_name import NodeName
from fairgpu.engine.plugins.node_resources import BalancedAllocation, NodeResourcesFit
from fairgpu.engine.plugins.node_unschedulable import NodeUnschedulable
from fairgpu.engine.plugins.storage import STORAGE_PLUGINS
from fairgpu.engine.plugins.taint_toleration import TaintToleration

PluginFactory = Callable[..., Plugin]

REGISTRY: dict[str, PluginFactory] = {}
DEVICE_POLICIES: dict[str, PluginFactory] = {}


def register(name: str, factory: PluginFactory, device_policy: bool = False) -> None:
    """Make ``factory`` available under ``name`` (overrides a built-in of the same name)."""
    (DEVICE_POLICIES if device_policy else REGISTRY)[name] = factory


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


def build(name: str, args: dict[str, Any] | None = None, device_policy: bool = False) -> Plugin:
    """Instantiate plugin ``name`` (a registered name or ``module:Class``) with ``args``."""
    table = DEVICE_POLICIES if device_policy else REGISTRY
    factory = table.get(name) or (_import(name) if ":" in name else None)
    if factory is None:
        kind = "device policy" if device_policy else "plugin"
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(sorted(table))}")
    try:
        return factory(**(args or {}))
    except TypeError as error:
        raise ValueError(f"plugin {name!r}: bad arguments {args!r}: {error}") from None


for _cls in (
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
    *STORAGE_PLUGINS,
    DynamicResources,
    DynamicResourcesPacking,
):
    register(_cls.name, _cls)
for _cls in (DeviceBestFit, DeviceSpread, DeviceRandom):
    register(_cls.name, _cls, device_policy=True)
