"""Input datasets for the worker: ``.npz`` or ``.parquet`` with ``id``, ``x`` and optional ``label``.

* npz: arrays ``x`` (n, ...) plus optional ``id`` (n,) and ``label`` (n,).
* parquet: columns ``id`` (int64), ``x`` (list<float32>, one flattened item per row; the item shape is kept in
  the schema metadata key ``x_shape``) and optional ``label`` (int64).

Missing ``id`` means row numbers. Items are reshaped to the model's input shape by the session, so a flat
64-value item and a 1x8x8 item are equally fine.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from oltunes.errors import DataError
from oltunes.atomic import atomic_write

FORMATS = (".npz", ".parquet")


@dataclass(frozen=True)
class Dataset:
    """Items to run: ``x`` (n, ...) with their ``ids`` (n,) and, when known, ``labels`` (n,)."""

    ids: np.ndarray
    x: np.ndarray
    labels: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def slice(self, start: int, stop: int) -> Dataset:
        return Dataset(
            self.ids[start:stop], self.x[start:stop], None if self.labels is None else self.labels[start:stop]
        )


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise DataError(f"dataset {path}: unsupported format {suffix or '(none)'!r}; use one of {', '.join(FORMATS)}")
    return suffix


def read_dataset(path: Path | str) -> Dataset:
    """Read and validate a dataset; raises `DataError` naming the file and what is wrong with it."""
    path = Path(path)
    suffix = _suffix(path)
    if not path.is_file():
        raise DataError(f"dataset {path} does not exist")
    try:
        ids, x, labels = _read_npz(path) if suffix == ".npz" else _read_parquet(path)
    except DataError:
        raise
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, pa.ArrowException) as e:
        raise DataError(f"dataset {path} cannot be read ({type(e).__name__}: {e}); is it a valid {suffix} file?") from e
    return _validate(path, ids, x, labels)


def _read_npz(path: Path) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    # allow_pickle=False: a dataset is data, never code.
    with np.load(path, allow_pickle=False) as z:
        if "x" not in z.files:
            raise DataError(f"dataset {path}: no array named 'x' (found: {', '.join(z.files) or 'none'})")
        return (z["id"] if "id" in z.files else None, z["x"], z["label"] if "label" in z.files else None)


def _read_parquet(path: Path) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    table = pq.read_table(path)
    if "x" not in table.column_names:
        raise DataError(f"dataset {path}: no column named 'x' (found: {', '.join(table.column_names) or 'none'})")
    n = table.num_rows
    col = table.column("x").combine_chunks()
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type):
        if col.null_count:
            raise DataError(f"dataset {path}: column 'x' has {col.null_count} null items")
        flat = col.flatten().to_numpy(zero_copy_only=False)
        width = len(flat) // n if n else 0
        if n and width * n != len(flat):
            raise DataError(f"dataset {path}: items in column 'x' have different lengths")
        meta = (table.schema.metadata or {}).get(b"x_shape")
        shape = tuple(json.loads(meta)) if meta else (width,)
        if int(np.prod(shape)) != width:
            shape = (width,)
        x = flat.reshape((n, *shape))
    else:
        x = col.to_numpy(zero_copy_only=False).reshape(n, 1)
    ids = table.column("id").to_numpy() if "id" in table.column_names else None
    labels = table.column("label").to_numpy() if "label" in table.column_names else None
    return ids, x, labels


def _validate(path: Path, ids: np.ndarray | None, x: np.ndarray, labels: np.ndarray | None) -> Dataset:
    if x.ndim == 0 or x.shape[0] == 0:
        raise DataError(f"dataset {path} is empty (no items in 'x')")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise DataError(f"dataset {path}: 'x' has dtype {x.dtype}; expected a numeric array")
    n = x.shape[0]
    ids = np.arange(n, dtype=np.int64) if ids is None else np.asarray(ids)
    if np.issubdtype(x.dtype, np.floating):  # NaN/Inf items give silently wrong predictions: refuse them
        bad = ~np.isfinite(x.reshape(n, -1)).all(axis=1)
        if bad.any():
            raise DataError(
                f"dataset {path}: column 'x' has {int(bad.sum())} of {n} rows with NaN or Inf values "
                f"(first at row {int(np.argmax(bad))}); drop or repair them"
            )
    if ids.shape != (n,):
        raise DataError(f"dataset {path}: 'id' has shape {ids.shape}, expected ({n},) to match 'x'")
    if not np.issubdtype(ids.dtype, np.integer):
        raise DataError(f"dataset {path}: 'id' must be integers, got dtype {ids.dtype}")
    if len(np.unique(ids)) != n:
        raise DataError(f"dataset {path}: 'id' values are not unique; resumable output needs unique ids")
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != (n,):
            raise DataError(f"dataset {path}: 'label' has shape {labels.shape}, expected ({n},) to match 'x'")
        if not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"dataset {path}: 'label' must be integer class ids, got dtype {labels.dtype}")
        labels = labels.astype(np.int64, copy=False)
    return Dataset(ids.astype(np.int64, copy=False), x, labels)


def write_dataset(path: Path | str, data: Dataset) -> Path:
    """Write `data` atomically as npz or parquet (chosen by the suffix of `path`)."""
    path = Path(path)
    suffix = _suffix(path)

    def _write(tmp: Path) -> None:
        if suffix == ".npz":
            arrays = {"id": data.ids, "x": data.x}
            if data.labels is not None:
                arrays["label"] = data.labels
            with open(tmp, "wb") as f:  # a file object stops numpy from appending ".npz" to the temp name
                np.savez(f, **arrays)
        else:
            n = len(data)
            flat = np.ascontiguousarray(data.x).reshape(n, -1)
            offsets = pa.array(np.arange(0, flat.size + 1, flat.shape[1], dtype=np.int32))
            cols = {
                "id": pa.array(data.ids, pa.int64()),
                "x": pa.ListArray.from_arrays(offsets, pa.array(flat.ravel())),
            }
            if data.labels is not None:
                cols["label"] = pa.array(data.labels, pa.int64())
            table = pa.table(cols).replace_schema_metadata({"x_shape": json.dumps(list(data.x.shape[1:]))})
            pq.write_table(table, tmp)

    return atomic_write(path, _write)
