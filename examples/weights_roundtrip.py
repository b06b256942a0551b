"""Weights in safetensors files: save, inspect, load under a budget, and map names (`tinax.weights`).

What it shows:

- `save_safetensors(path, tensors, overwrite=False, metadata=...)` writes host
  NumPy arrays atomically and refuses an existing file. A transposed (not
  C-contiguous) array is stored in its logical order, which the upstream
  writer gets wrong (safetensors#825).
- `inspect_safetensors` reads only the header: names, shapes, dtypes, sizes
  and metadata, without reading any tensor data.
- `load_safetensors(path, max_bytes=..., names=[...])` loads just the named
  tensors, and refuses a selection larger than the byte budget before reading
  any data.
- A `TensorManifest` of `TensorRule`s maps the file's names to a model's
  (here PyTorch-style `(out, in)` weights to `(in, out)` kernels), checks
  each result's shape and dtype, and reports every mismatch in one error.

Files go to a temporary folder. Run it with `python examples/weights_roundtrip.py`.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import numpy as np

from tinax.weights import TensorManifest, TensorRule, inspect_safetensors, load_safetensors, save_safetensors


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"weights_roundtrip: expected, but not observed: {claim}")
    print(claim)


def to_kernel(weight: np.ndarray) -> np.ndarray:
    """PyTorch stores a linear layer's weight as (out, in); the model wants an (in, out) kernel."""
    return np.ascontiguousarray(weight.T)


def run(folder: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    tensors = {
        "encoder.weight": rng.normal(size=(32, 16)).astype(np.float32),
        "encoder.bias": rng.normal(size=(32,)).astype(np.float32),
        "head.weight": np.arange(4 * 32, dtype=np.float32).reshape(32, 4).T,  # A transposed view.
        "head.bias": np.zeros(4, np.float32),
    }
    path = folder / "model.safetensors"
    # Metadata is read and written only under an explicit size limit (0, the default, allows none).
    metadata_limit = 64
    save_safetensors(
        path, tensors, overwrite=False, metadata={"format": "pt", "layers": "2"}, max_metadata_bytes=metadata_limit
    )
    try:
        save_safetensors(path, tensors, overwrite=False)
        refused = False
    except FileExistsError:
        refused = True
    report("save_safetensors wrote the file and refused to replace it without overwrite=True", refused)

    info = inspect_safetensors(path, max_metadata_bytes=metadata_limit)
    for name, tensor in info.tensors.items():
        print(f"  {name:<16} {tensor.dtype!s:<8} {tensor.shape!s:<9} {tensor.nbytes} bytes")
    report(
        f"inspect_safetensors: {len(info.tensors)} tensors, {info.nbytes} bytes, metadata {info.metadata}, "
        "from the header alone",
        set(info.tensors) == set(tensors) and info.metadata == {"format": "pt", "layers": "2"},
    )

    head_names = ["head.weight", "head.bias"]
    head_bytes = sum(info.tensors[name].nbytes for name in head_names)
    head = load_safetensors(path, max_bytes=head_bytes, names=head_names, max_metadata_bytes=metadata_limit)
    report(
        f"load_safetensors(names={head_names}, max_bytes={head_bytes}) loaded just those tensors, "
        "the transposed one in its logical order",
        list(head.tensors) == head_names and np.array_equal(head.tensors["head.weight"], tensors["head.weight"]),
    )
    try:
        load_safetensors(path, max_bytes=head_bytes, max_metadata_bytes=metadata_limit)
        message = ""
    except ValueError as error:
        message = str(error)
    print(f"load_safetensors of every tensor under the same budget raised ValueError: {message}")
    report("load_safetensors refused a selection over its byte budget", f"max_bytes={head_bytes}" in message)

    manifest = TensorManifest(
        [
            TensorRule("encoder.weight", "encoder/kernel", transform=to_kernel, expected_shape=(16, 32)),
            TensorRule("encoder.bias", "encoder/bias", expected_shape=(32,), expected_dtype=np.float32),
            TensorRule("head.weight", "head/kernel", transform=to_kernel, expected_shape=(32, 4)),
            TensorRule("head.bias", "head/bias", expected_shape=(4,), expected_dtype=np.float32),
        ]
    )
    params = manifest.load(path, max_bytes=info.nbytes, max_metadata_bytes=metadata_limit)
    report(
        f"TensorManifest mapped {len(params)} tensors to the model's names and (in, out) kernel layout",
        list(params) == list(manifest.destination_names)
        and np.array_equal(params["encoder/kernel"], tensors["encoder.weight"].T),
    )

    wrong = TensorManifest(
        [
            TensorRule("encoder.weight", "encoder/kernel", expected_shape=(16, 32)),
            TensorRule("encoder.bias", "encoder/bias", expected_dtype=np.float16),
            TensorRule("decoder.weight", "decoder/kernel"),
        ]
    )
    try:
        wrong.load(path, max_bytes=info.nbytes, max_metadata_bytes=metadata_limit)
        message = ""
    except ValueError as error:
        message = str(error)
    print(f"a mismatched manifest raised ValueError: {message}")
    report("TensorManifest reported the missing source", "missing=['decoder.weight']" in message)


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        run(pathlib.Path(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
