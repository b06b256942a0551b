"""Runs tinax-data's tests on 8 CPU devices, set before any JAX backend starts."""

from collections.abc import Iterator

import pytest

from tinax_testing import force_cpu_devices
from tinax_testing.flags import absl_flags_parsed
from tinax_testing.object_storage import gcs_store, object_store, s3_store  # noqa: F401 - fixtures

force_cpu_devices()


@pytest.fixture
def parsed_flags() -> Iterator[None]:
    """absl flags parsed for the test, as grain's worker processes need."""
    with absl_flags_parsed():
        yield
