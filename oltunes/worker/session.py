"""One ONNX Runtime session: provider choice, input checks, and the inference call.

The provider actually used is read back from ``session.get_providers()`` after creation: ONNX Runtime
silently falls back to CPU when the CUDA provider is listed as available but fails to load.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort

from oltunes.errors import DataError, MissingDependency, ModelError

Device = Literal["auto", "cpu", "cuda"]
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"

# ONNX tensor type strings -> numpy dtypes the worker can feed.
_ONNX_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
}


def _brief(e: Exception, limit: int = 400) -> str:
    """ONNX Runtime messages put the source location first and the reason last: keep both ends."""
    text = " ".join(str(e).split())
    return text if len(text) <= limit else f"{text[:120]} ... {text[-(limit - 125) :]}"


def requested_providers(device: Device) -> list[str]:
    """Providers to ask ONNX Runtime for; ``cuda`` without the CUDA build refuses with a clear message."""
    available = ort.get_available_providers()
    if device == "cpu":
        return [CPU]
    if CUDA in available:
        return [CUDA, CPU]
    if device == "cuda":
        raise MissingDependency(
            "device 'cuda' requested but this onnxruntime has no CUDA provider "
            f"(available: {', '.join(available)}); install the 'gpu' extra (onnxruntime-gpu) on a GPU host or use --device cpu"
        )
    return [CPU]


def session_options(threads: int) -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1  # one model, sequential graph: inter-op threads only add wake-ups
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3  # errors only; warnings about unused initializers are noise here
    return opts


@dataclass
class ModelSession:
    """A loaded model plus what the worker needs to feed it.

    Parameters
    ----------
    path
        ONNX file. Single-input models only; the first output is taken as class scores ``(n, classes)``
        (or values ``(n,)``).
    threads
        ONNX Runtime intra-op threads.
    device
        ``auto`` (CUDA when it really loads, else CPU), ``cpu`` or ``cuda``.
    """

    path: Path
    threads: int = 1
    device: Device = "auto"
    session: ort.InferenceSession = field(init=False, repr=False)
    provider: str = field(init=False)
    input_name: str = field(init=False)
    input_shape: tuple[int | None, ...] = field(init=False)
    input_dtype: np.dtype = field(init=False)
    output_name: str = field(init=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not self.path.is_file():
            raise ModelError(
                f"model file {self.path} does not exist; build the zoo (`oltunes zoo build`) or pass a valid ONNX path"
            )
        providers = requested_providers(self.device)
        try:
            self.session = ort.InferenceSession(str(self.path), session_options(self.threads), providers=providers)
        except Exception as e:  # onnxruntime raises its own Fail/InvalidProtobuf/... types without a common base
            raise ModelError(
                f"model file {self.path} could not be loaded by ONNX Runtime ({_brief(e)}); is it a valid ONNX model?"
            ) from e
        self.provider = self.session.get_providers()[0]
        if self.device == "cuda" and self.provider != CUDA:
            raise MissingDependency(
                f"device 'cuda' requested but ONNX Runtime fell back to {self.provider} (CUDA libraries missing?)"
            )
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        if len(inputs) != 1:
            raise ModelError(
                f"model {self.path} has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); the worker feeds single-input models"
            )
        meta = inputs[0]
        if meta.type not in _ONNX_DTYPES:
            raise ModelError(
                f"model {self.path}: input type {meta.type} is not supported (supported: {', '.join(_ONNX_DTYPES)})"
            )
        self.input_name = meta.name
        self.input_shape = tuple(d if isinstance(d, int) and d > 0 else None for d in meta.shape)
        self.input_dtype = np.dtype(_ONNX_DTYPES[meta.type])
        self.output_name = outputs[0].name

    @property
    def device_kind(self) -> str:
        """``cuda`` or ``cpu``: where the compute really runs."""
        return "cuda" if self.provider == CUDA else "cpu"

    @property
    def fixed_batch(self) -> int | None:
        return self.input_shape[0] if self.input_shape else None

    @property
    def item_shape(self) -> tuple[int | None, ...]:
        return self.input_shape[1:]

    def prepare(self, x: np.ndarray) -> np.ndarray:
        """Reshape and cast items ``x`` (n, ...) to the model input, or raise `DataError` saying why not.

        Done once per dataset, so the per-batch path is only slicing.
        """
        x = np.asarray(x)
        want = np.dtype(self.input_dtype)
        if x.dtype != want:
            same_kind = (np.issubdtype(x.dtype, np.floating) and np.issubdtype(want, np.floating)) or (
                np.issubdtype(x.dtype, np.integer) and np.issubdtype(want, np.integer) and np.can_cast(x.dtype, want)
            )
            if not same_kind:
                raise DataError(
                    f"input dtype {x.dtype} does not match the model input '{self.input_name}' dtype {want}; convert the data first"
                )
            x = x.astype(want)
        item = self.item_shape
        shown = "(n, " + ", ".join("?" if d is None else str(d) for d in item) + ")"
        if None in item:
            if x.ndim != len(self.input_shape):
                raise DataError(
                    f"input shape {tuple(x.shape)} does not match the model input '{self.input_name}' {shown}"
                )
            return np.ascontiguousarray(x)
        per_item = int(np.prod(item)) if item else 1
        got = int(np.prod(x.shape[1:])) if x.ndim > 1 else 1
        if got != per_item:
            raise DataError(
                f"input items have shape {tuple(x.shape[1:])} ({got} values) but the model input '{self.input_name}' "
                f"expects {shown} ({per_item} values per item)"
            )
        return np.ascontiguousarray(x.reshape((x.shape[0], *item)))

    def run(self, x: np.ndarray) -> np.ndarray:
        """Raw first output for a prepared batch."""
        try:
            return self.session.run([self.output_name], {self.input_name: x})[0]
        except Exception as e:
            raise ModelError(
                f"inference failed on model {self.path.name} for a batch of shape {tuple(x.shape)}: {_brief(e)}"
            ) from e


def predictions(scores: np.ndarray) -> np.ndarray:
    """Class ids from class scores ``(n, classes)``; 1-D outputs are returned as they are."""
    return scores.argmax(axis=1) if scores.ndim == 2 else scores.reshape(scores.shape[0], -1)[:, 0]


class SessionPool:
    """Sessions shared by threads: each call borrows an idle session for one batch (batch and serve mode)."""

    def __init__(self, sessions: list[ModelSession]) -> None:
        self._idle: queue.SimpleQueue[ModelSession] = queue.SimpleQueue()
        for s in sessions:
            self._idle.put(s)

    def run(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        """The raw first output for the prepared batch `x` and the session call's latency in milliseconds."""
        session = self._idle.get()
        try:
            t = time.perf_counter()
            out = session.run(x)
            return out, (time.perf_counter() - t) * 1e3
        finally:
            self._idle.put(session)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        """Predictions (class ids) for the prepared batch `x` and the session call's latency in milliseconds."""
        out, ms = self.run(x)
        return predictions(out), ms
