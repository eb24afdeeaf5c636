"""The storage plugins kube-scheduler runs by default, in its filter order."""

from __future__ import annotations

from fairgpu.engine.plugins.node_volume_limits import NodeVolumeLimits
from fairgpu.engine.plugins.volume_binding import VolumeBinding
from fairgpu.engine.plugins.volume_restrictions import VolumeRestrictions
from fairgpu.engine.plugins.volume_zone import VolumeZone

STORAGE_PLUGINS = (VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone)
