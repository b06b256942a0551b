"""The implementation of :mod:`tinax.parallel`. Private: import from the public module."""
