"""``tinax info``: what is installed, on which platform, and whether the install is intact."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

from tinax._core._command._integrity import check_distribution, repair_command, tinax_distributions
from tinax._core._command._report import Report

__all__ = ["THIRD_PARTY", "environment_report"]

#: The third-party distributions whose versions ``tinax info`` lists, where installed.
THIRD_PARTY = (
    "jax",
    "jaxlib",
    "numpy",
    "ml_dtypes",
    "flax",
    "orbax-checkpoint",
    "grain",
    "pyarrow",
    "safetensors",
    "array-record",
)


def environment_report(*, devices: bool) -> Report:
    """Describes the environment (starting JAX only with ``devices``); problems carry their repair commands."""
    report = Report("info", "environment")
    report.summary["python"] = platform.python_version()
    report.summary["executable"] = sys.executable
    report.summary["platform"] = platform.platform()
    report.summary["machine"] = platform.machine()
    rows = []
    for distribution in tinax_distributions():
        check = check_distribution(distribution)
        repair = repair_command(distribution) if check.problems else None
        rows.append(
            {
                "name": check.name,
                "version": check.version,
                "files checked": check.files,
                "status": "ok" if not check.problems else f"{len(check.problems)} problems",
                "repair": repair,
            }
        )
        report.problems.extend(
            f"{check.name} {check.version}: {problem}; repair: {repair}" for problem in check.problems
        )
    report.add_table("tinax distributions", ("name", "version", "files checked", "status", "repair"), rows)
    packages = []
    for name in THIRD_PARTY:
        try:
            packages.append({"name": name, "version": metadata.version(name)})
        except metadata.PackageNotFoundError:
            continue
    report.add_table("packages", ("name", "version"), packages)
    if devices:
        _add_devices(report)
    return report


def _add_devices(report: Report) -> None:
    import jax

    report.summary["backend"] = jax.default_backend()
    report.summary["process count"] = jax.process_count()
    report.summary["process index"] = jax.process_index()
    rows = [
        {"id": device.id, "platform": device.platform, "kind": device.device_kind, "process": device.process_index}
        for device in jax.devices()
    ]
    report.add_table("devices", ("id", "platform", "kind", "process"), rows)
