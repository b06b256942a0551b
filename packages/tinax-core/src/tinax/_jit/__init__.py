"""The implementation of :mod:`tinax.jit`. Private: import from the public module."""
