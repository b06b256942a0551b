"""tinax.data (being built: public names are added here as they land)."""

__all__: list[str] = []
