"""Tenancy: queues, users, quotas, fair shares, usage history and pod groups.

Pure data and arithmetic the engine uses to decide *who* gets the next GPU; placement itself
stays in :mod:`fairgpu.engine`.
"""

from fairgpu.tenancy.config import TenancyConfig, default_config, load_config, parse_config
from fairgpu.tenancy.fairshare import (
    dominant_share,
    fair_share_series,
    fair_shares,
    hierarchical_fair_shares,
    jain_index,
    weighted_max_min,
)
from fairgpu.tenancy.resolve import PodGroupRef, Tenant, TenantResolver

__all__ = [
    "PodGroupRef",
    "TenancyConfig",
    "Tenant",
    "TenantResolver",
    "default_config",
    "dominant_share",
    "fair_share_series",
    "fair_shares",
    "hierarchical_fair_shares",
    "jain_index",
    "load_config",
    "parse_config",
    "weighted_max_min",
]
