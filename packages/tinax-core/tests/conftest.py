"""Runs tinax-core's tests on 8 CPU devices, set before any JAX backend starts."""

from tinax_testing import force_cpu_devices

force_cpu_devices()
