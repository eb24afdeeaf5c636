"""Cluster state: nodes, GPU devices and running pods held as numpy arrays."""
