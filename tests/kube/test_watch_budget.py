"""The scheduler's connection pool outnumbers its watches: each watch holds a connection for as
long as it runs, and the pool blocks when it is used up -- one watch too many and a bind
waits for ever (it did, with one bind worker, when the Job watch was added)."""

from __future__ import annotations

from fairgpu.kube import LiveScheduler
from fairgpu.kube.client import Connection
from fairgpu.kube.config import RunConfig
from fairgpu.kube.podgroups import POD_GROUP_APIS
from fairgpu.kube.reflector import Reflector
from fairgpu.kube.scheduler import WATCHES


def test_every_watch_fits_in_the_budget_the_pool_is_sized_by() -> None:
    config = RunConfig(
        connection=Connection("http://127.0.0.1:9", "token", None),  # never dialled here
        leader_elect=False,
        metrics_port=0,
        install_signal_handlers=False,
        forecast_seconds=0,
    )
    s = LiveScheduler(config)
    own = [v for v in vars(s).values() if isinstance(v, Reflector)]
    watches = len(own) + len(s.volume_watch.reflectors) + len(s.dra_watch.reflectors)
    watches += len(POD_GROUP_APIS)  # one per PodGroup API the cluster may serve
    assert watches <= WATCHES
    assert s.client._pool.pool.maxsize >= config.bind_workers + watches + 8
