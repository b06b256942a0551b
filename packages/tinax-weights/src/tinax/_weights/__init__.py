"""The implementation of :mod:`tinax.weights`. Private: import from the public module.

``_safetensors`` holds the safetensors format (header, dtypes, whole files,
indexes, sharded loads and saves); msgpack state dicts and tensor manifests
sit beside it with the path checks, buckets and 0.2's errors they share.
"""
