"""Behaviour of tinax.device: pre-JAX environment policy, the runtime summary and detection.

The environment functions must run before JAX is imported, and this test
process imported JAX in conftest.py. Their effects are therefore checked in
fresh interpreters (one per scenario group, to keep the suite fast); in this
process they can only refuse.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import types

import jax
import numpy as np
import pytest

import tinax.device as device_api
from tinax.device import (
    DeviceInfo,
    GpuInfo,
    TpuInfo,
    configure_jax,
    configure_single_chip,
    device_info,
    gpus,
    set_visible_cuda,
    tpus,
)
from tinax_testing import TEST_DEVICE_COUNT, import_side_effects

POLICY_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "TPU_PROCESS_BOUNDS",
    "TPU_VISIBLE_CHIPS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "JAX_DEFAULT_MATMUL_PRECISION",
)

# Runs each scenario from a clean policy environment and reports, per
# scenario, the exception type it raised (or None), the policy variables it
# left, and whether jax was imported by then.
_SCENARIO_RUNNER = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    from tinax.device import configure_jax, configure_single_chip, set_visible_cuda

    VARIABLES = VARIABLES_LITERAL
    results = {}
    for label, source in SCENARIOS_LITERAL:
        for name in VARIABLES:
            os.environ.pop(name, None)
        try:
            exec(source)
            error = None
        except Exception as caught:
            error = type(caught).__name__
        results[label] = {
            "error": error,
            "env": {name: os.environ[name] for name in VARIABLES if name in os.environ},
            "jax_imported": "jax" in sys.modules,
        }
    print(json.dumps(results))
    """
)


def run_scenarios(scenarios: dict[str, str]) -> dict[str, dict[str, object]]:
    """Runs ``{label: statements}`` in one fresh interpreter that has not imported jax."""
    program = _SCENARIO_RUNNER.replace("VARIABLES_LITERAL", repr(POLICY_VARIABLES)).replace(
        "SCENARIOS_LITERAL", repr(list(scenarios.items()))
    )
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("PYTEST") and key not in POLICY_VARIABLES
    }
    environment["JAX_PLATFORMS"] = "cpu"
    completed = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=environment, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr
    results: dict[str, dict[str, object]] = json.loads(completed.stdout.strip().splitlines()[-1])
    return results


# Importing ---------------------------------------------------------------------


def test_public_names():
    assert set(device_api.__all__) == {
        "configure_jax",
        "configure_single_chip",
        "set_visible_cuda",
        "DeviceInfo",
        "device_info",
        "GpuInfo",
        "TpuInfo",
        "gpus",
        "tpus",
    }


def test_import_starts_no_backend_and_no_integration():
    assert import_side_effects("tinax.device", watched=("flax", "pynvml", "tpu_info", "rich")) == {
        "backends_initialized": False,
        "integrations": [],
    }


def test_import_does_not_import_jax():
    # The policy functions are useless if importing their module already loads JAX.
    results = run_scenarios({"import": "pass"})
    assert results["import"]["jax_imported"] is False


# set_visible_cuda ----------------------------------------------------------------


def test_set_visible_cuda_keeps_the_given_order_before_jax():
    results = run_scenarios(
        {
            "list": "set_visible_cuda([2, 0, 1])",
            "range": "set_visible_cuda(range(3))",
            "generator": "set_visible_cuda(index for index in (3, 1))",
            "numpy": "set_visible_cuda(np.array([1, 2]))",
            "empty": "set_visible_cuda([])",
        }
    )
    assert results["list"]["env"] == {"CUDA_VISIBLE_DEVICES": "2,0,1"}
    assert results["range"]["env"] == {"CUDA_VISIBLE_DEVICES": "0,1,2"}
    assert results["generator"]["env"] == {"CUDA_VISIBLE_DEVICES": "3,1"}
    assert results["numpy"]["env"] == {"CUDA_VISIBLE_DEVICES": "1,2"}
    # An empty list hides every GPU, which is different from leaving the variable unset.
    assert results["empty"]["env"] == {"CUDA_VISIBLE_DEVICES": ""}
    assert not any(result["jax_imported"] for result in results.values())


def test_set_visible_cuda_refuses_bad_indices_and_changes_nothing():
    results = run_scenarios(
        {
            "bool": "set_visible_cuda([True])",
            "float": "set_visible_cuda([1.0])",
            "str item": "set_visible_cuda(['0'])",
            "str": "set_visible_cuda('01')",
            "bytes": "set_visible_cuda(b'01')",
            "not iterable": "set_visible_cuda(0)",
            "None": "set_visible_cuda(None)",
            "negative after a good one": "set_visible_cuda([0, -1])",
            "repeated": "set_visible_cuda([0, 1, 0])",
        }
    )
    expected_errors = {
        "bool": "TypeError",
        "float": "TypeError",
        "str item": "TypeError",
        "str": "TypeError",
        "bytes": "TypeError",
        "not iterable": "TypeError",
        "None": "TypeError",
        "negative after a good one": "ValueError",
        "repeated": "ValueError",
    }
    assert {label: result["error"] for label, result in results.items()} == expected_errors
    assert all(result["env"] == {} for result in results.values())


# configure_single_chip --------------------------------------------------------------


def test_configure_single_chip_bounds_the_process_to_one_chip():
    results = run_scenarios(
        {
            "chip 3": "configure_single_chip(3)",
            "numpy chip": "configure_single_chip(np.int32(2))",
            "keeps other topology": "os.environ['TPU_CHIPS_PER_PROCESS_BOUNDS'] = '2,2,1'; configure_single_chip(1)",
        }
    )
    assert results["chip 3"]["env"] == {"TPU_PROCESS_BOUNDS": "1,1,1", "TPU_VISIBLE_CHIPS": "3"}
    assert results["numpy chip"]["env"] == {"TPU_PROCESS_BOUNDS": "1,1,1", "TPU_VISIBLE_CHIPS": "2"}
    assert results["keeps other topology"]["env"] == {
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "2,2,1",
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "TPU_VISIBLE_CHIPS": "1",
    }
    assert not any(result["jax_imported"] for result in results.values())


def test_configure_single_chip_refuses_bad_chips():
    results = run_scenarios(
        {
            "bool": "configure_single_chip(True)",
            "float": "configure_single_chip(1.0)",
            "str": "configure_single_chip('1')",
            "None": "configure_single_chip(None)",
            "negative": "configure_single_chip(-1)",
        }
    )
    assert {label: result["error"] for label, result in results.items()} == {
        "bool": "TypeError",
        "float": "TypeError",
        "str": "TypeError",
        "None": "TypeError",
        "negative": "ValueError",
    }
    assert all(result["env"] == {} for result in results.values())


# configure_jax ---------------------------------------------------------------------


def test_configure_jax_without_precision_stays_before_jax():
    results = run_scenarios(
        {
            "default off": "configure_jax(matmul_precision=None)",
            "on": "configure_jax(preallocate=True, matmul_precision=None)",
            "keeps precision variable": (
                "os.environ['JAX_DEFAULT_MATMUL_PRECISION'] = 'highest'; configure_jax(matmul_precision=None)"
            ),
            "then other policy": (
                "configure_jax(matmul_precision=None); set_visible_cuda([0]); configure_single_chip(0)"
            ),
        }
    )
    assert results["default off"]["env"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert results["on"]["env"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}
    assert results["keeps precision variable"]["env"] == {
        "JAX_DEFAULT_MATMUL_PRECISION": "highest",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    assert results["then other policy"]["error"] is None
    assert not any(result["jax_imported"] for result in results.values())


def test_configure_jax_with_precision_sets_jax_and_ends_the_pre_jax_phase():
    results = run_scenarios(
        {
            "highest": (
                "configure_jax(matmul_precision='highest')\n"
                "import jax\n"
                "assert jax.config.jax_default_matmul_precision == 'highest'\n"
                "from jax._src import xla_bridge\n"
                "assert not xla_bridge.backends_are_initialized()"
            ),
            "then set_visible_cuda": "set_visible_cuda([0])",
        }
    )
    assert results["highest"]["error"] is None
    assert results["highest"]["env"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert results["highest"]["jax_imported"] is True
    # JAX is imported now, so the other policy functions refuse.
    assert results["then set_visible_cuda"]["error"] == "RuntimeError"
    assert results["then set_visible_cuda"]["env"] == {}


def test_configure_jax_refuses_an_unknown_precision_and_changes_nothing():
    results = run_scenarios({"unknown": "configure_jax(matmul_precision='fastest')"})
    assert results["unknown"]["error"] == "ValueError"
    assert results["unknown"]["env"] == {}


@pytest.mark.parametrize("preallocate", [1, "true", None, np.bool_(True)])
def test_configure_jax_requires_a_bool_preallocate(preallocate):
    with pytest.raises(TypeError, match="preallocate"):
        configure_jax(preallocate=preallocate)


@pytest.mark.parametrize("precision", [3, b"high", ["high"]])
def test_configure_jax_requires_a_str_or_none_precision(precision):
    with pytest.raises(TypeError, match="matmul_precision"):
        configure_jax(matmul_precision=precision)


@pytest.mark.parametrize(
    "call",
    [
        lambda: set_visible_cuda([0]),
        lambda: set_visible_cuda("not even valid"),
        lambda: configure_single_chip(0),
        lambda: configure_single_chip(-1),
        lambda: configure_jax(),
        lambda: configure_jax(matmul_precision=None),
    ],
    ids=["cuda", "cuda-invalid", "chip", "chip-invalid", "jax", "jax-no-precision"],
)
def test_policy_refuses_once_jax_is_imported(call, monkeypatch):
    for name in POLICY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert "jax" in sys.modules
    with pytest.raises(RuntimeError, match="before importing JAX"):
        call()
    assert not any(name in os.environ for name in POLICY_VARIABLES)


# device_info ------------------------------------------------------------------------


def test_device_info_summarizes_the_cpu_runtime():
    info = device_info()

    assert info == DeviceInfo(
        backend="cpu",
        device_count=TEST_DEVICE_COUNT,
        local_device_count=TEST_DEVICE_COUNT,
        process_index=0,
        process_count=1,
        device_kinds=tuple(device.device_kind for device in jax.devices()),
    )
    assert len(info.device_kinds) == TEST_DEVICE_COUNT
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.backend = "gpu"  # type: ignore[misc]


def test_detection_records_are_immutable_values():
    gpu = GpuInfo(index=0, name="A100", total_bytes=1.0, free_bytes=0.5, compute_capability="8.0")
    tpu = TpuInfo(generation="v5e", count=4, devices_per_chip=1, hbm_gib=16)

    assert gpu == GpuInfo(0, "A100", 1.0, 0.5, "8.0")
    assert hash(tpu) == hash(TpuInfo("v5e", 4, 1, 16))
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpu.free_bytes = 0.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tpu.count = 8  # type: ignore[misc]


# gpus -----------------------------------------------------------------------------


def test_gpus_is_empty_on_a_host_without_an_nvidia_driver():
    pytest.importorskip("pynvml", reason="needs the gpu extra: pip install 'tinax-core[gpu]'")
    if os.path.exists("/proc/driver/nvidia"):
        pytest.skip("this host has an NVIDIA driver")

    assert gpus() == []


def test_gpus_without_the_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(ImportError, match=r'pip install "tinax-core\[gpu\]"') as caught:
        gpus()
    assert isinstance(caught.value.__cause__, ImportError)


class StandInNvml(types.ModuleType):
    """Answers like NVML on a host with two GPUs; no host here has a real one.

    Only the calls gpus() makes are provided, with the value types the real
    bindings return (the older bindings return names as bytes).
    """

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    def __init__(self, *, init_error: int | None = None, failing_index: int | None = None) -> None:
        super().__init__("pynvml")
        self.init_error = init_error
        self.failing_index = failing_index
        self.open_sessions = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.NVMLError(self.init_error)
        self.open_sessions += 1

    def nvmlShutdown(self) -> None:
        self.open_sessions -= 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index == self.failing_index:
            raise self.NVMLError(999)
        return index

    def nvmlDeviceGetName(self, handle: int) -> str | bytes:
        return "NVIDIA H100 80GB HBM3" if handle == 0 else b"NVIDIA A100-SXM4-40GB"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=(80 - 40 * handle) * 2**30, free=(70 - 40 * handle) * 2**30)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (9, 0) if handle == 0 else (8, 0)


def test_gpus_reports_each_device_and_closes_nvml(monkeypatch):
    nvml = StandInNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)

    found = gpus()

    assert found == [
        GpuInfo(0, "NVIDIA H100 80GB HBM3", float(80 * 2**30), float(70 * 2**30), "9.0"),
        GpuInfo(1, "NVIDIA A100-SXM4-40GB", float(40 * 2**30), float(30 * 2**30), "8.0"),
    ]
    assert all(isinstance(gpu.total_bytes, float) and isinstance(gpu.name, str) for gpu in found)
    assert float(found[0].compute_capability) > float(found[1].compute_capability)
    assert nvml.open_sessions == 0


@pytest.mark.parametrize("code", [9, 12], ids=["driver-not-loaded", "library-not-found"])
def test_gpus_treats_a_missing_driver_as_no_gpu(monkeypatch, code):
    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml(init_error=code))
    assert gpus() == []


def test_gpus_passes_other_nvml_errors_through_and_still_closes_nvml(monkeypatch):
    nvml = StandInNvml(failing_index=1)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with pytest.raises(StandInNvml.NVMLError):
        gpus()
    assert nvml.open_sessions == 0

    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml(init_error=3))
    with pytest.raises(StandInNvml.NVMLError):
        gpus()


# tpus -----------------------------------------------------------------------------


def test_tpus_is_empty_on_a_host_without_tpu_chips():
    pytest.importorskip("tpu_info", reason="needs the tpu extra: pip install 'tinax-core[tpu]'")
    from tpu_info import device as tpu_device

    if tpu_device.get_local_chips()[1]:
        pytest.skip("this host has TPU chips")
    assert tpus() == []


def test_tpus_reports_the_generation_and_its_specs(monkeypatch):
    pytest.importorskip("tpu_info", reason="needs the tpu extra: pip install 'tinax-core[tpu]'")
    from tpu_info import device as tpu_device

    # No TPU here: stand in for the PCI scan only, and keep tpu-info's own chip table.
    monkeypatch.setattr(tpu_device, "get_local_chips", lambda: (tpu_device.TpuChip.V5E, 4))
    assert tpus() == [TpuInfo(generation="v5e", count=4, devices_per_chip=1, hbm_gib=16)]

    monkeypatch.setattr(tpu_device, "get_local_chips", lambda: (tpu_device.TpuChip.V7X, 8))
    assert tpus() == [TpuInfo(generation="7x", count=8, devices_per_chip=2, hbm_gib=192)]


def test_tpus_without_the_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "tpu_info", None)
    monkeypatch.setitem(sys.modules, "tpu_info.device", None)
    with pytest.raises(ImportError, match=r'pip install "tinax-core\[tpu\]"') as caught:
        tpus()
    assert isinstance(caught.value.__cause__, ImportError)
