"""The implementation of :mod:`tinax.device`. Private: import from the public module."""
