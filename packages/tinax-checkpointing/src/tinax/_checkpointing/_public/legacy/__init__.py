"""Readers and writers for checkpoint formats that tinax keeps only for old pipelines.

Nothing here is re-exported: each format lives in its own subpackage, such as
``tinax.checkpointing.legacy.v0`` for Orbax's V0 API, and must be imported
by that name. New checkpoints belong in ``tinax.checkpointing``.
"""

import tinax.checkpointing as _parent

__all__: list[str] = []

#: The version of the installed tinax-checkpointing distribution, which ships this module. Read from the parent
#: module, which is imported first: this file lies below the private package (see ``tinax/checkpointing.py``'s
#: ``__path__``), where no dist-info sits beside a ``tinax`` folder to read it from.
__version__: str = _parent.__version__
