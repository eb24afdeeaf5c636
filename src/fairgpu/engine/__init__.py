"""The pure scheduling engine: no I/O, no clock reads, no threads.

It takes a :class:`~fairgpu.cluster.state.ClusterState` and pods and returns decisions; the
simulator and the live Kubernetes adapter call exactly this code.
"""
