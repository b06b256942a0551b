"""Environment policy that the JAX runtime reads when it starts.

Each function must run before ``jax`` is imported and refuses afterwards rather than silently
having no effect. Nothing here imports JAX at module level.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tinax._core import validation
from tinax._device._validation import require_jax_unimported, validate_device_index

__all__ = ["configure_jax", "configure_single_chip", "set_visible_cuda"]


def set_visible_cuda(indices: Iterable[int]) -> None:
    """Limits the CUDA devices this process sees, in the given order.

    Sets ``CUDA_VISIBLE_DEVICES``, keeping the order (``[2, 0]`` makes GPU 2 ``cuda:0``); an
    empty iterable hides every GPU. Indices follow ``CUDA_DEVICE_ORDER`` (fastest first by
    default), which differs from :func:`tinax.device.gpus`' NVML order unless ``PCI_BUS_ID``.

    Args:
      indices: A finite iterable of distinct non-negative int GPU indices (``str``/``bytes`` refused).

    Raises:
      RuntimeError: If ``jax`` has already been imported.
      TypeError: If ``indices`` is not an iterable of integers (bools refused).
      ValueError: If an index is negative or repeats.

    Examples:
      >>> import subprocess
      >>> import sys
      >>> program = '''
      ... from tinax.device import set_visible_cuda
      ... set_visible_cuda([1, 0])  # before jax is imported
      ... import os
      ... print(os.environ["CUDA_VISIBLE_DEVICES"])
      ... '''
      >>> subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.strip()
      '1,0'
    """
    require_jax_unimported("set_visible_cuda()")
    if isinstance(indices, (str, bytes, bytearray)):
        validation.fail_type("indices", "an iterable of int GPU indices", indices)
    try:
        items = iter(indices)
    except TypeError:
        validation.fail_type("indices", "an iterable of int GPU indices", indices)
    checked = [validate_device_index(item, f"indices[{position}]") for position, item in enumerate(items)]
    # A repeated index would show fewer GPUs than listed.
    validation.require_unique(checked, "indices")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in checked)


def configure_single_chip(chip: int) -> None:
    """Makes this process own exactly one local TPU chip.

    Sets ``TPU_PROCESS_BOUNDS=1,1,1`` and ``TPU_VISIBLE_CHIPS=chip``, so several processes on one
    TPU host can each run on their own chip. Other TPU topology variables are left alone.

    Args:
      chip: The local chip index, a non-negative integer.

    Raises:
      RuntimeError: If ``jax`` has already been imported.
      TypeError: If ``chip`` is a bool or not an integer.
      ValueError: If ``chip`` is negative.

    Examples:
      >>> import subprocess
      >>> import sys
      >>> program = '''
      ... from tinax.device import configure_single_chip
      ... configure_single_chip(0)  # before jax is imported
      ... import os
      ... print(os.environ["TPU_VISIBLE_CHIPS"], os.environ["TPU_PROCESS_BOUNDS"])
      ... '''
      >>> subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.strip()
      '0 1,1,1'
    """
    require_jax_unimported("configure_single_chip()")
    index = validate_device_index(chip, "chip")
    os.environ["TPU_PROCESS_BOUNDS"] = "1,1,1"
    os.environ["TPU_VISIBLE_CHIPS"] = str(index)


def configure_jax(*, preallocate: bool = False, matmul_precision: str | None = "high") -> None:
    """Sets the accelerator memory policy and the default matmul precision.

    Sets ``XLA_PYTHON_CLIENT_PREALLOCATE`` for the GPU client. A ``matmul_precision`` imports JAX
    (no backend starts) to update ``jax_default_matmul_precision``, so the environment functions
    refuse afterwards; with None JAX is not imported and its setting is left alone.

    Args:
      preallocate: Whether the GPU client reserves most memory up front (JAX's default) rather
        than allocating on demand.
      matmul_precision: A value ``jax_default_matmul_precision`` accepts (``"default"``, ``"high"``,
        ``"highest"``, ``"bfloat16"``, ...), or None to keep JAX's setting.

    Raises:
      TypeError: If ``preallocate`` is not a bool, or ``matmul_precision`` neither a ``str`` nor None.
      RuntimeError: If ``jax`` has already been imported.
      ValueError: If JAX does not know ``matmul_precision`` (nothing is changed then).

    Examples:
      >>> import subprocess
      >>> import sys
      >>> program = '''
      ... from tinax.device import configure_jax
      ... configure_jax(preallocate=False, matmul_precision="highest")  # before jax is imported
      ... import os, jax
      ... print(os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"], jax.config.jax_default_matmul_precision)
      ... '''
      >>> subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.strip()
      'false highest'
    """
    validation.require_bool(preallocate, "preallocate")
    if matmul_precision is not None and not isinstance(matmul_precision, str):
        validation.fail_type("matmul_precision", "a str or None", matmul_precision)
    require_jax_unimported("configure_jax()")
    if matmul_precision is not None:
        # JAX checks the precision itself (values grow between releases), before the environment changes.
        import jax

        try:
            jax.config.update("jax_default_matmul_precision", matmul_precision)  # type: ignore[no-untyped-call]
        except ValueError as error:
            raise ValueError(
                validation.expectation_message(
                    "matmul_precision", "a precision that jax_default_matmul_precision accepts", matmul_precision
                )
                + f" ({error})"
            ) from error
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true" if preallocate else "false"
