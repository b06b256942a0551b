"""Runs tinax-checkpointing's tests on 8 CPU devices, set before any JAX backend starts."""

from tinax_testing import force_cpu_devices
from tinax_testing.object_storage import gcs_store, s3_store  # noqa: F401 - fixtures of test_object_storage.py

force_cpu_devices()
