"""The scheduler's own view of pods and nodes, decoded once from Kubernetes objects."""
