"""Safetensors files: the format's header and dtypes, whole files, indexes of many files, sharded loads and saves."""
