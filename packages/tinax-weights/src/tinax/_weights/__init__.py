"""The implementation of :mod:`tinax.weights`. Private: import from the public module."""
