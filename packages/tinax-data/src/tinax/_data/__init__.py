"""The implementation of :mod:`tinax.data`. Private: import from the public module."""
