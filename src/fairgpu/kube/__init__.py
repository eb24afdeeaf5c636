"""The live adapter: fairgpu as a Kubernetes scheduler.

A thin layer around the pure engine — watches feed a cache, the engine decides, bindings and
evictions go to the API server. No scheduling logic lives here. Entry point: :func:`run`
(``fairgpu run``).
"""

from fairgpu.kube.scheduler import LiveScheduler, RunConfig, run

__all__ = ["LiveScheduler", "RunConfig", "run"]
