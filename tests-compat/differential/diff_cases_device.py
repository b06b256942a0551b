"""Differential cases of ``tinax.device``.

The configuration functions must run before JAX is imported, so this module
imports neither JAX nor NumPy at the top. The cases run in order: first those
that leave JAX unimported (each restores the environment variables it
changed), then the few that import JAX each run in a fresh interpreter, then
``configure_jax`` with a precision imports JAX in this process, and every
later case sees JAX imported.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from typing import Any

from diff_common import Cases
from diff_describe import RaisedNames, attempt

import tinax.device as td

M = "tinax.device"

#: The variables the configuration functions set.
VARIABLES = ("CUDA_VISIBLE_DEVICES", "TPU_PROCESS_BOUNDS", "TPU_VISIBLE_CHIPS", "XLA_PYTHON_CLIENT_PREALLOCATE")


def _environment_after(call: Any) -> dict[str, Any]:
    """Runs ``call`` and reports the variables it set and whether JAX got imported; restores them."""
    saved = {name: os.environ.get(name) for name in VARIABLES}
    try:
        call()
        return {
            "environment": {name: os.environ.get(name) for name in VARIABLES},
            "jax_imported": "jax" in sys.modules,
        }
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_CHILD = """
import json, os, sys
import tinax.device as td
result = {}
try:
    td.configure_jax(**json.loads(sys.argv[1]))
except Exception as error:
    result["raised"] = [f"{c.__module__}.{c.__qualname__}" for c in type(error).__mro__]
names = ("CUDA_VISIBLE_DEVICES", "TPU_PROCESS_BOUNDS", "TPU_VISIBLE_CHIPS", "XLA_PYTHON_CLIENT_PREALLOCATE")
result["environment"] = {name: os.environ.get(name) for name in names}
result["jax_imported"] = "jax" in sys.modules
if result["jax_imported"]:
    import jax
    result["matmul_precision"] = jax.config.jax_default_matmul_precision
print(json.dumps(result))
"""


def _in_fresh_interpreter(keywords: dict[str, Any]) -> Any:
    """``configure_jax(**keywords)`` in a new interpreter: what it set, raised and configured."""
    environment = {key: value for key, value in os.environ.items() if key not in VARIABLES}
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(keywords)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    if completed.returncode != 0:
        return {"exit": completed.returncode, "stderr_tail": completed.stderr.strip().splitlines()[-1:]}
    result = json.loads(completed.stdout)
    raised = result.pop("raised", None)
    if raised:
        result["raised"] = RaisedNames(raised)
    return result


def _before_jax(cases: Cases) -> None:
    cases.add(f"{M}.configure_jax", "import-leaves-jax-unimported", lambda _: {"jax_imported": "jax" in sys.modules})
    index_lists: dict[str, Any] = {
        "one": [0],
        "two": [1, 0],
        "empty": [],
        "tuple": (2,),
        "range": range(3),
        "generator": lambda: (index for index in (3, 1)),
        "bool": [True],
        "negative": [-1],
        "string_items": ["0"],
        "repeated": [0, 0],
        "bytes": b"\x00\x01",
        "string": "01",
        "none": None,
        "int": 5,
        "float_items": [0.0],
        "big": [10**6],
        "set": {2},
        "dict": {1: "a"},
    }
    for name, indices in index_lists.items():
        cases.add(
            f"{M}.set_visible_cuda",
            f"indices-{name}",
            lambda _, i=indices: _environment_after(lambda: td.set_visible_cuda(i() if callable(i) else i)),
        )
    chips: dict[str, Any] = {
        "zero": 0,
        "three": 3,
        "negative": -1,
        "bool": True,
        "string": "0",
        "none": None,
        "float": 1.0,
    }
    for name, chip in chips.items():
        cases.add(
            f"{M}.configure_single_chip",
            f"chip-{name}",
            lambda _, c=chip: _environment_after(lambda: td.configure_single_chip(c)),
        )
    cases.add(f"{M}.configure_single_chip", "chip-missing", lambda _: td.configure_single_chip())  # type: ignore[call-arg]
    preallocations: dict[str, Any] = {"true": True, "false": False, "none": None, "int1": 1, "string": "true"}
    for name, preallocate in preallocations.items():
        cases.add(
            f"{M}.configure_jax",
            f"preallocate-{name}",
            lambda _, p=preallocate: _environment_after(lambda: td.configure_jax(preallocate=p, matmul_precision=None)),
        )
    for name, precision in {"int": 1, "bytes": b"high", "list": ["high"]}.items():
        cases.add(
            f"{M}.configure_jax",
            f"matmul_precision-{name}",
            lambda _, m=precision: _environment_after(lambda: td.configure_jax(matmul_precision=m)),
        )
    cases.add(f"{M}.configure_jax", "positional", lambda _: td.configure_jax(True))  # type: ignore[misc]
    for name, keywords in {
        "default": {},
        "highest": {"matmul_precision": "highest", "preallocate": True},
        "unknown": {"matmul_precision": "bogus"},
        "tensorfloat32": {"matmul_precision": "tensorfloat32"},
    }.items():
        cases.add(f"{M}.configure_jax", f"fresh-interpreter-{name}", lambda _, k=keywords: _in_fresh_interpreter(k))


def _importing_jax(cases: Cases) -> None:
    def configure(_: Any) -> Any:
        result = _environment_after(lambda: td.configure_jax(preallocate=False, matmul_precision="float32"))
        import jax

        result["matmul_precision"] = jax.config.jax_default_matmul_precision
        return result

    cases.add(f"{M}.configure_jax", "imports-jax-here", configure)


def _after_jax(cases: Cases) -> None:
    cases.add(f"{M}.set_visible_cuda", "after-jax", lambda _: _environment_after(lambda: td.set_visible_cuda([0])))
    cases.add(
        f"{M}.set_visible_cuda",
        "after-jax-bad-index",
        lambda _: _environment_after(lambda: td.set_visible_cuda([-1])),
    )
    cases.add(
        f"{M}.configure_single_chip",
        "after-jax",
        lambda _: _environment_after(lambda: td.configure_single_chip(0)),
    )
    cases.add(
        f"{M}.configure_single_chip",
        "after-jax-bad-chip",
        lambda _: _environment_after(lambda: td.configure_single_chip(True)),
    )
    cases.add(f"{M}.configure_jax", "after-jax", lambda _: _environment_after(lambda: td.configure_jax()))
    cases.add(
        f"{M}.configure_jax",
        "after-jax-bad-preallocate",
        lambda _: _environment_after(lambda: td.configure_jax(preallocate=1)),
    )
    cases.add(f"{M}.device_info", "default", lambda _: td.device_info())
    cases.add(f"{M}.device_info", "twice-equal", lambda _: td.device_info() == td.device_info())
    cases.add(f"{M}.device_info", "argument", lambda _: td.device_info(0))  # type: ignore[call-arg]
    cases.add(f"{M}.gpus", "default", lambda _: td.gpus())
    cases.add(f"{M}.tpus", "default", lambda _: td.tpus())
    cases.add(f"{M}.gpus", "argument", lambda _: td.gpus(0))  # type: ignore[call-arg]

    constructions = {
        "DeviceInfo": [
            ("cpu", 8, 8, 0, 1, ("cpu",) * 8),
            ("gpu", 0, 0, 0, 1, ()),
        ],
        "GpuInfo": [(0, "NVIDIA H100", 8.0e10, 7.5e10, "9.0"), (1, "", 0.0, 0.0, "")],
        "TpuInfo": [("v5e", 4, 1, 16), ("v4", 1, 2, 32)],
    }
    for class_name, argument_sets in constructions.items():
        for arguments in argument_sets:
            cases.add(
                f"{M}.{class_name}",
                "construct",
                lambda _, c=class_name, a=arguments: _dataclass_facts(getattr(td, c), a),
            )
        cases.add(f"{M}.{class_name}", "missing-field", lambda _, c=class_name: getattr(td, c)())
        cases.add(
            f"{M}.{class_name}", "frozen", lambda _, c=class_name, a=argument_sets[0]: _assign(getattr(td, c)(*a))
        )


class _NVMLError(Exception):
    """The exception class of the fake NVML bindings: an error code in ``value``, as pynvml has."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _fake_nvml(
    devices: list[tuple[Any, int, int, tuple[int, int]]], init_error: int | None, query_error: int | None
) -> Any:
    """A stand-in for ``pynvml`` (nvidia-ml-py) describing ``devices``: (name, total, free, capability)."""
    module = types.ModuleType("pynvml")
    calls: list[str] = []
    module.NVMLError = _NVMLError  # type: ignore[attr-defined]
    module.NVML_ERROR_DRIVER_NOT_LOADED = 9  # type: ignore[attr-defined]
    module.NVML_ERROR_LIBRARY_NOT_FOUND = 12  # type: ignore[attr-defined]

    def init() -> None:
        calls.append("init")
        if init_error is not None:
            raise _NVMLError(init_error)

    def handle(index: int) -> int:
        if query_error is not None and index == len(devices) - 1:
            raise _NVMLError(query_error)
        return index

    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: len(devices)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = handle  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda index: devices[index][0]  # type: ignore[attr-defined]
    module.nvmlDeviceGetMemoryInfo = lambda index: types.SimpleNamespace(  # type: ignore[attr-defined]
        total=devices[index][1], free=devices[index][2], used=devices[index][1] - devices[index][2]
    )
    module.nvmlDeviceGetCudaComputeCapability = lambda index: devices[index][3]  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    return module


def _with_modules(modules: dict[str, Any], call: Any) -> Any:
    """``call()`` with ``modules`` standing in for installed ones; what it returned or raised, and the calls made."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        result = attempt(call)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return {"result": result, "calls": [getattr(module, "calls", None) for module in modules.values()]}


def _detection(cases: Cases) -> None:
    gpu_hosts: dict[str, Any] = {
        "two_gpus": (
            [("NVIDIA H100 80GB HBM3", 85899345920, 85000000000, (9, 0)), ("NVIDIA A10", 24 << 30, 1 << 30, (8, 6))],
            None,
            None,
        ),
        "bytes_name": ([(b"Tesla T4", 16 << 30, 15 << 30, (7, 5))], None, None),
        "no_gpu": ([], None, None),
        "library_not_found": ([], 12, None),
        "driver_not_loaded": ([], 9, None),
        "other_init_error": ([], 999, None),
        "query_fails": ([("A", 1, 1, (8, 0)), ("B", 2, 2, (8, 0))], None, 15),
        "float_memory": ([("C", 1.5e9, 1e9, (8, 9))], None, None),
    }
    for name, (devices, init_error, query_error) in gpu_hosts.items():
        cases.add(
            f"{M}.gpus",
            f"fake-nvml-{name}",
            lambda _, d=devices, i=init_error, q=query_error: _with_modules({"pynvml": _fake_nvml(d, i, q)}, td.gpus),
        )

    def fake_tpu_info(chip: Any, count: int) -> dict[str, Any]:
        package = types.ModuleType("tpu_info")
        device = types.ModuleType("tpu_info.device")
        device.get_local_chips = lambda: (chip, count)  # type: ignore[attr-defined]
        package.device = device  # type: ignore[attr-defined]
        return {"tpu_info": package, "tpu_info.device": device}

    chip = types.SimpleNamespace(value=types.SimpleNamespace(name="v5e", devices_per_chip=1, hbm_gib=16))
    chip_v4 = types.SimpleNamespace(value=types.SimpleNamespace(name="v4", devices_per_chip=2, hbm_gib=32))
    tpu_hosts: dict[str, Any] = {
        "none": (None, 0),
        "four_v5e": (chip, 4),
        "one_v4": (chip_v4, 1),
        "eight_v4": (chip_v4, 8),
    }
    for name, (chip_type, count) in tpu_hosts.items():
        cases.add(
            f"{M}.tpus",
            f"fake-tpu-info-{name}",
            lambda _, c=chip_type, n=count: _with_modules(fake_tpu_info(c, n), td.tpus),
        )


def _dataclass_facts(cls: type, arguments: tuple[Any, ...]) -> Any:
    value = cls(*arguments)
    twin = cls(*arguments)
    return {
        "value": value,
        "repr": repr(value),
        "equal": value == twin,
        "hash_equal": hash(value) == hash(twin),
        "fields": [field.name for field in dataclasses.fields(value)],
        "astuple": dataclasses.astuple(value),
    }


def _assign(value: Any) -> Any:
    field = dataclasses.fields(value)[0].name
    setattr(value, field, getattr(value, field))
    return value


def build(cases: Cases) -> None:
    """Every case of ``tinax.device``, in the order JAX's import state requires."""
    _before_jax(cases)
    _importing_jax(cases)
    _after_jax(cases)
    _detection(cases)
