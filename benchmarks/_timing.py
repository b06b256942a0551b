"""Interleaved timing shared by the benchmarks.

Every round times each variant once, in a shuffled order, so drift in machine
load hits all variants alike. Reports give the median and minimum per call,
and per comparison the median of the per-round ratios and the ratio of the
minimums.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import jax


def time_per_call(call: Callable[[], Any], calls: int) -> float:
    result = None
    start = time.perf_counter()
    for _ in range(calls):
        result = call()
    jax.block_until_ready(result)
    return (time.perf_counter() - start) / calls


def run(variants: dict[str, Callable[[], Any]], calls: int, repeats: int, seed: int) -> dict[str, list[float]]:
    order = list(variants)
    rng = random.Random(seed)
    for call in variants.values():  # warm up: compile, fill caches
        time_per_call(call, max(calls // 10, 1))
    samples: dict[str, list[float]] = {name: [] for name in order}
    for _ in range(repeats):
        rng.shuffle(order)
        for name in order:
            samples[name].append(time_per_call(variants[name], calls))
    return samples


def report(
    title: str, samples: dict[str, list[float]], comparisons: list[tuple[str, str]], unit: str = "us"
) -> list[float]:
    scale = {"us": 1e6, "ms": 1e3}[unit]
    print(f"\n{title}")
    for name, values in samples.items():
        print(
            f"  {name:<36} median {statistics.median(values) * scale:9.3f} {unit}"
            f"   min {min(values) * scale:9.3f} {unit} per call"
        )
    ratios = []
    for candidate, baseline in comparisons:
        per_round = [new / old for new, old in zip(samples[candidate], samples[baseline], strict=True)]
        ratio = statistics.median(per_round)
        ratio_of_min = min(samples[candidate]) / min(samples[baseline])
        ratios.append(ratio)
        print(f"  ratio {candidate} / {baseline}: median {ratio:.3f}, of minimums {ratio_of_min:.3f}")
    return ratios


def run_probe(script: str, arguments: list[str], src: str | None) -> dict[str, Any]:
    """Runs ``script`` in a fresh interpreter (with ``src`` first on its path) and returns its last line's JSON."""
    environment = dict(os.environ)
    if src is not None:
        # An earlier tinax-data's src folder, found before the installed one.
        environment["PYTHONPATH"] = src + os.pathsep + environment.get("PYTHONPATH", "")
    completed = subprocess.run(
        [sys.executable, "-c", script, *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
        env=environment,
    )
    if completed.returncode:
        raise RuntimeError(f"probe {arguments[:1]} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
