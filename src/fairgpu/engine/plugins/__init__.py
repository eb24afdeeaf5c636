"""Built-in plugins, one per module; :mod:`fairgpu.engine.registry` maps names to factories."""
