# Type information for `tinax.checkpointing.legacy` (see ../__init__.pyi).

__all__: list[str] = []

__version__: str
