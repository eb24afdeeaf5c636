"""Kubernetes API objects as fairgpu reads them: quantities and lean decoders."""
