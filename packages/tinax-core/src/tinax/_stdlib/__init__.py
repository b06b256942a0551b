"""The implementation of :mod:`tinax.stdlib`. Private: import from the public module."""
