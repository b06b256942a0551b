"""The implementation of :mod:`tinax.checkpointing`. Private: import from the public module."""
