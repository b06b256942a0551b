"""The implementation of :mod:`tinax.checkpointing.legacy.v0`. Private: import from the public module."""
