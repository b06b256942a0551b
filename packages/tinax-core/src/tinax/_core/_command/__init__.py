"""The ``tinax`` command: ``tinax info`` and ``tinax inspect PATH``.

Nothing here is public API. The command imports only the standard library
until a subcommand needs more, so ``tinax --help`` starts no JAX backend.
Each distribution contributes the inspectors of its file kinds through the
``tinax.inspectors`` entry-point group (see :mod:`._registry`).
"""
