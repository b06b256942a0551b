"""Readers and writers for checkpoint formats that tinax keeps only for old pipelines.

Nothing here is re-exported: each format lives in its own subpackage, such as
``tinax.checkpointing.legacy.v0`` for Orbax's V0 API, and must be imported
by that name. New checkpoints belong in ``tinax.checkpointing``.
"""

import tinax.checkpointing as _parent

__all__: list[str] = []

#: The tinax-checkpointing version, read from the parent module: this file lies below the private package
#: (see ``tinax/checkpointing.py``'s ``__path__``), where no dist-info sits beside a ``tinax`` folder.
__version__: str = _parent.__version__
