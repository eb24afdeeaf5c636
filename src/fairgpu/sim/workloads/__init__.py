"""Workload sources for the simulator: synthetic, Kubernetes YAML and the openb trace."""
