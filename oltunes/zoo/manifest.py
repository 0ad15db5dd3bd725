"""The zoo manifest: one JSON file (``<zoo_dir>/manifest.json``, written atomically) listing every variant.

Each entry is a `oltunes.types.Variant` plus what a worker or a cache check needs (input name/shape/dtype,
file hash, config hash, evaluation set). Paths inside the zoo directory are stored relative to it, so the
whole folder can move; `load_entries` returns them absolute.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError

from oltunes.atomic import atomic_write_json, sha256_file
from oltunes.config import get_settings
from oltunes.errors import ModelError
from oltunes.types import Variant
from oltunes.zoo.flops import onnx_gflops
from oltunes.zoo.spec import PRECISIONS, SIZES

if TYPE_CHECKING:
    from oltunes.worker.session import ModelSession

MANIFEST = "manifest.json"
FORMAT = 1


class ZooEntry(Variant):
    """A manifest entry: the shared `Variant` fields plus bookkeeping."""

    source: Literal["zoo", "user"] = "zoo"
    config_hash: str = ""
    sha256: str = ""
    input_name: str = "x"
    input_shape: tuple[int | None, ...] = ()
    input_dtype: str = "float32"
    output_name: str = ""
    eval_set: str | None = None
    eval_items: int = Field(default=0, ge=0)
    built_at: float = 0.0

    def variant(self) -> Variant:
        """The plain shared type (other areas pass `Variant` around, never the bookkeeping)."""
        return Variant(**{k: getattr(self, k) for k in Variant.model_fields})


def model_fields(path: Path, session: ModelSession) -> dict[str, Any]:
    """The entry fields read from a model file and its loaded session (shipped and user variants alike)."""
    return {
        "bytes": path.stat().st_size,
        "gflops": onnx_gflops(path),  # counted from the graph (0.0: not countable)
        "path": str(path),
        "sha256": sha256_file(path),
        "input_name": session.input_name,
        "input_shape": session.input_shape,
        "input_dtype": str(session.input_dtype),
        "output_name": session.output_name,
        "built_at": time.time(),
    }


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _rel(path: str | None, root: Path) -> str | None:
    if path is None:
        return None
    p = Path(path)
    return str(p.relative_to(root)) if p.is_absolute() and p.is_relative_to(root) else str(p)


def _abs(path: str | None, root: Path) -> str | None:
    return None if path is None else str(Path(path) if Path(path).is_absolute() else root / path)


def load_entries(zoo_dir: Path, *, tolerate_corrupt: bool = False) -> list[ZooEntry]:
    """Entries of the manifest in `zoo_dir` (empty when there is none yet)."""
    path = zoo_dir / MANIFEST
    if not path.is_file():
        return []
    try:
        raw = json.loads(path.read_text())
        entries = [ZooEntry(**e) for e in raw["variants"]]
    except (OSError, ValueError, KeyError, TypeError, ValidationError) as e:
        if tolerate_corrupt:
            return []
        raise ModelError(
            f"zoo manifest {path} is unreadable ({type(e).__name__}); rebuild it with `oltunes zoo build --force`"
        ) from e
    return [
        e.model_copy(update={"path": _abs(e.path, zoo_dir), "eval_set": _abs(e.eval_set, zoo_dir)}) for e in entries
    ]


def _order(e: ZooEntry) -> tuple:
    def rank(value: str, seq: tuple[str, ...]) -> int:
        return seq.index(value) if value in seq else len(seq)

    return (e.source != "zoo", e.family, rank(e.size, SIZES), e.size, rank(e.precision, PRECISIONS), e.name)


def zoo_dir_or_default(zoo_dir: Path | str | None) -> Path:
    return Path(zoo_dir) if zoo_dir is not None else get_settings().zoo_dir


def save_entries(zoo_dir: Path, entries: list[ZooEntry]) -> Path:
    rows = [
        e.model_copy(update={"path": _rel(e.path, zoo_dir), "eval_set": _rel(e.eval_set, zoo_dir)}).model_dump(
            mode="json"
        )
        for e in sorted(entries, key=_order)
    ]
    return atomic_write_json(zoo_dir / MANIFEST, {"format": FORMAT, "variants": rows})


@contextmanager
def locked(zoo_dir: Path) -> Iterator[None]:
    """Serialise writers of one zoo directory (two processes building at once would race on the files)."""
    zoo_dir.mkdir(parents=True, exist_ok=True)
    with open(zoo_dir / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
