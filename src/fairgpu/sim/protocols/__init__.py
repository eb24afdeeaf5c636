"""Published experiment protocols replayed through the engine (e.g. the FGD openb protocol)."""
