"""Runs the differential cases of one tinax module and records what came back.

    python diff_runner.py MODULE OUTPUT            run every case, write OUTPUT/MODULE.run.pkl
    python diff_runner.py MODULE OUTPUT --read-other OTHER
                                                   read the files the other side wrote under
                                                   OTHER, write OUTPUT/MODULE.read.pkl

It runs unchanged under tinax 0.2 (in 0.2's own environment) and under ours;
it imports nothing of the project but the files beside it. Each case's files
go to OUTPUT/files/MODULE/<case>/. The records hold only builtins, so the
pickles load on either side.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import importlib
import os
import pickle
import re
import shutil
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import diff_describe  # noqa: E402
from diff_common import Cases  # noqa: E402

#: The modules with cases, and the tinax module each covers.
MODULES = {
    "array": "tinax.array",
    "jit": "tinax.jit",
    "grad": "tinax.grad",
    "random": "tinax.random",
    "device": "tinax.device",
    "debug": "tinax.debug",
    "stdlib": "tinax.stdlib",
    "parallel": "tinax.parallel",
    "nn": "tinax.nn",
    "data": "tinax.data",
    "checkpointing": "tinax.checkpointing",
    "legacy_v0": "tinax.checkpointing.legacy.v0",
    "weights": "tinax.weights",
}

#: No single case may take longer than this (it is then recorded as timed out).
CASE_SECONDS = 120


class CaseTimeout(BaseException):
    """Raised in a case that ran past CASE_SECONDS."""


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout(f"case ran past {CASE_SECONDS} s")


def public_names(module_name: str) -> list[str]:
    """The public names of a tinax module: ``__all__``, else what it defines without a leading _."""
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    if exported is not None:
        return sorted(exported)
    names = []
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        owner = getattr(value, "__module__", None) or ""
        if owner == "tinax" or owner.startswith("tinax."):
            names.append(name)
    return sorted(names)


def file_digests(folder: Path) -> dict[str, Any]:
    """Every file under ``folder``: relative path to size and sha256; folders too."""
    listing: dict[str, Any] = {}
    if not folder.exists():
        return listing
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_symlink():
            target = os.readlink(path)
            inside = os.path.relpath(target, folder) if os.path.isabs(target) else target
            listing[relative] = ["link", inside]
        elif path.is_dir():
            listing[relative] = ["dir"]
        else:
            data = path.read_bytes()
            listing[relative] = ["file", len(data), hashlib.sha256(data).hexdigest()]
    return listing


_UNAWAITED_COROUTINE = re.compile(r"coroutine '[^']*' was never awaited")


def run_one(call: Any, argument: Path) -> dict[str, Any]:
    """Runs ``call(argument)``: its description or its exception's, and the warnings it gave."""
    record: dict[str, Any] = {}
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        signal.alarm(CASE_SECONDS)
        try:
            try:
                value = call(argument)
            finally:
                signal.alarm(0)
        except CaseTimeout as error:
            record["result"] = {"k": "timeout", "message": str(error)}
        except BaseException as error:
            if isinstance(error, KeyboardInterrupt):
                raise
            record["result"] = diff_describe.describe_exception(error)
            record["traceback"] = "".join(traceback.format_exception(error))[-3000:]
        else:
            try:
                record["result"] = diff_describe.describe(value)
            except Exception as error:
                record["result"] = {"k": "describe_failed", "error": diff_describe.describe_exception(error)}
                record["traceback"] = "".join(traceback.format_exception(error))[-3000:]
            del value
    record["warnings"] = [
        {
            "category": diff_describe.type_name(warning.category),
            "message": diff_describe.relative_text(str(warning.message))[:300],
        }
        for warning in caught
        # Python reports a coroutine that was never awaited when the garbage collector frees it, which can be
        # during any later case: Orbax leaves such coroutines behind in refused saves, so the report says
        # nothing about the case that happens to be running.
        if not _UNAWAITED_COROUTINE.fullmatch(str(warning.message))
    ]
    record["seconds"] = round(time.perf_counter() - started, 3)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("module", choices=sorted(MODULES))
    parser.add_argument("output", type=Path)
    parser.add_argument("--read-other", type=Path, help="the other side's output folder")
    arguments = parser.parse_args()

    output: Path = arguments.output.resolve()
    output.mkdir(parents=True, exist_ok=True)
    files_root = output / "files" / arguments.module
    if arguments.read_other is None and files_root.exists():
        shutil.rmtree(files_root)  # Every case starts from an empty folder.
    files_root.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, _alarm)

    cases_module = importlib.import_module(f"diff_cases_{arguments.module}")
    collection = Cases()
    cases_module.build(collection)
    only = os.environ.get("TINAX_DIFFERENTIAL_ONLY")
    if only:  # For debugging one case: a fnmatch pattern of case ids.
        collection.items = [case for case in collection if fnmatch.fnmatchcase(case.id, only)]
    ids = [case.id for case in collection]
    if len(set(ids)) != len(ids):
        raise SystemExit("diff_runner: duplicate case ids")

    verbose = bool(os.environ.get("TINAX_DIFFERENTIAL_VERBOSE"))
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    if arguments.read_other is None:
        for case in collection:
            if verbose:
                print(f"diff_runner: {case.id}", file=sys.stderr, flush=True)
            folder = files_root / case.folder_name
            folder.mkdir(parents=True, exist_ok=True)
            diff_describe.set_folders({str(folder): "<case>", str(output): "<output>"})
            record = {"id": case.id, "function": case.function, "also": list(case.also), "files_mode": case.files}
            record.update(run_one(case.call, folder))
            if case.files is not None:
                record["files"] = file_digests(folder)
            if case.read is not None:
                record["self_read"] = run_one(case.read, folder)
            records.append(record)
        document = {
            "module": arguments.module,
            "tinax_module": MODULES[arguments.module],
            "phase": "run",
            "python": sys.version,
            "public_names": public_names(MODULES[arguments.module]),
            "cases": records,
            "seconds": round(time.perf_counter() - started, 3),
        }
        target = output / f"{arguments.module}.run.pkl"
    else:
        other_root = arguments.read_other.resolve() / "files" / arguments.module
        for case in collection:
            if case.read is None:
                continue
            folder = other_root / case.folder_name
            diff_describe.set_folders({str(folder): "<case>", str(arguments.read_other.resolve()): "<output>"})
            record = {"id": case.id, "function": case.function}
            record.update(run_one(case.read, folder))
            records.append(record)
        document = {
            "module": arguments.module,
            "phase": "read",
            "cases": records,
            "seconds": round(time.perf_counter() - started, 3),
        }
        target = output / f"{arguments.module}.read.pkl"
    temporary = target.with_suffix(".tmp")
    temporary.write_bytes(pickle.dumps(document, protocol=5))
    temporary.replace(target)
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is written. Orbax may still hold threads waiting on the signals of a
    # save that failed (under 0.2 they wait five minutes at interpreter exit): leave now.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
