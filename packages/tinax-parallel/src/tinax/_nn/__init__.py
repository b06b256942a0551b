"""The implementation of :mod:`tinax.nn`. Private: import from the public module."""
