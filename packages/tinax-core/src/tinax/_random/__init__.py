"""The implementation of :mod:`tinax.random`. Private: import from the public module."""
