"""The embedded simulated cluster: replays a workload through the engine at simulated time."""
