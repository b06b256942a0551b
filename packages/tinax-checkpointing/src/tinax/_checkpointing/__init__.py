"""The implementation of :mod:`tinax.checkpointing`. Private: import from the public module.

``_saving`` and ``_loading`` go through Orbax V1; ``_metadata`` reads what a
checkpoint's files say without loading it; ``_manager`` keeps a run's steps.
Training checkpoints, names, locations and 0.2's errors sit beside them.
"""
