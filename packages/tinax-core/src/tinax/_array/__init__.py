"""The implementation of :mod:`tinax.array`. Private: import from the public module."""
