"""The live adapter: fairgpu as a Kubernetes scheduler.

A thin layer around the pure engine — watches feed a cache, the engine decides, bindings and
evictions go to the API server. No scheduling logic lives here. Entry point: :func:`run`
(``fairgpu run``).
"""

import os
import socket
import uuid

from fairgpu.kube.scheduler import LiveScheduler, RunConfig

__all__ = ["LiveScheduler", "RunConfig", "run"]


def run(config: RunConfig) -> int:
    """Run the live scheduler until SIGTERM (or lost leadership); returns the exit code."""
    from fairgpu.kube.logs import setup_logging

    setup_logging(config.log_level)
    if config.identity is None:
        config.identity = (
            f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
        )
    return LiveScheduler(config).run()
