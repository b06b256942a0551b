"""The implementation of :mod:`tinax.debug`. Private: import from the public module."""
