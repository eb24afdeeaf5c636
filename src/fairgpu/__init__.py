"""fairgpu: fair, fragmentation-aware GPU scheduling for Kubernetes."""

__version__ = "0.1.0"
