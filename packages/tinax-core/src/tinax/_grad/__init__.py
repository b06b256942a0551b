"""The implementation of :mod:`tinax.grad`. Private: import from the public module."""
