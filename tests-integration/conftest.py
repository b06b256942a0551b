"""Cross-package tests run on 8 CPU devices, forced before JAX starts.

If JAX was already started with another device count (for example by a plugin
that imported it first), the session fails here rather than testing on the
wrong topology.
"""

from tinax_testing import force_cpu_devices

force_cpu_devices()
