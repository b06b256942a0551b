"""Readers and writers for checkpoint formats that tinax keeps only for old pipelines.

Nothing here is re-exported: each format lives in its own subpackage, such as
``tinax.checkpointing.legacy.v0`` for Orbax's V0 API, and must be imported
by that name. New checkpoints belong in ``tinax.checkpointing``.
"""

__all__: list[str] = []
