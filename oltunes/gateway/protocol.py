"""The Open Inference Protocol (KServe v2 REST), as far as OLTunes serves it: typed tensors in, typed tensors out.

Requests are JSON (``{"inputs": [{"name", "shape", "datatype", "data"}], "outputs"?, "id"?, "parameters"?}``) or
JSON plus raw tensor bytes (Triton's binary extension: header ``Inference-Header-Content-Length`` gives the JSON
size, each input's ``parameters.binary_data_size`` its bytes, in order), which is what ``tritonclient`` sends by
default. Responses follow the request: binary outputs when asked (``binary_data_output`` or an output's
``binary_data``), JSON ``data`` otherwise. Errors are ``{"error": "<message>"}``; a message names the field and
never repeats the input.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oltunes.errors import invalid

HEADER_LENGTH = "inference-header-content-length"
NAME_PATTERN = r"^[A-Za-z0-9_.\-:/]{1,128}$"
MAX_TENSORS = 16
MAX_RANK = 8

# OIP datatypes <-> numpy (BYTES, strings, is not served: the worker's models take numeric tensors).
DATATYPES: dict[str, np.dtype] = {
    name: np.dtype(t)
    for name, t in {
        "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
        "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
        "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    }.items()
}  # fmt: skip


def datatype_of(dtype: np.dtype) -> str:
    for name, t in DATATYPES.items():
        if t == dtype:
            return name
    raise ProtocolError(500, f"dtype {dtype} has no Open Inference Protocol datatype")


class ProtocolError(Exception):
    """An error to answer in the protocol's shape: HTTP `status` and ``{"error": message}``."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}

    def body(self) -> bytes:
        return error_body(self.message)


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestInput(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    shape: list[int] = Field(max_length=MAX_RANK)
    datatype: str = Field(pattern=r"^[A-Z0-9]{2,8}$")
    parameters: dict[str, Any] | None = None
    data: Any = None


class RequestOutput(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    parameters: dict[str, Any] | None = None


class InferenceRequest(_Strict):
    id: str | None = Field(default=None, max_length=256)
    parameters: dict[str, Any] | None = None
    inputs: list[RequestInput] = Field(min_length=1, max_length=MAX_TENSORS)
    outputs: list[RequestOutput] | None = Field(default=None, max_length=MAX_TENSORS)

    def binary_output(self, name: str) -> bool:
        for o in self.outputs or ():
            if o.name == name and o.parameters and "binary_data" in o.parameters:
                return bool(o.parameters["binary_data"])
        return bool((self.parameters or {}).get("binary_data_output", False))


class TensorMetadata(_Strict):
    name: str
    datatype: str
    shape: list[int]


MODEL_VERSION = "1"  # every served model has this one version (docs/gateway.md: what a version means here)


class ModelMetadata(_Strict):
    name: str
    versions: list[str] = [MODEL_VERSION]
    platform: str = "onnxruntime_onnx"
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]

    def check_version(self, version: str | None) -> None:
        """Refuse (404) a version this model does not have; None (no version in the path) is the latest."""
        if version is not None and version not in self.versions:
            raise ProtocolError(404, f"unknown version of model '{self.name}'; its versions are {', '.join(self.versions)}")

    def check_outputs(self, req: InferenceRequest) -> None:
        """Refuse (400) a request that asks for an output the model does not have, or for one twice."""
        names = [o.name for o in req.outputs or ()]
        known = {o.name for o in self.outputs}
        for i, name in enumerate(names):
            if name not in known:
                raise ProtocolError(400, f"outputs[{i}].name is not an output of model '{self.name}' (it has: {', '.join(sorted(known))})")
            if name in names[:i]:
                raise ProtocolError(400, f"outputs[{i}].name is requested twice")

    def check_input(self, i: int, t: RequestInput) -> None:
        """Refuse (400) an input the model does not declare, or one whose datatype or shape differs from the
        declaration (``-1``: any size). Nothing is cast: the client sends what the model takes."""
        where = f"inputs[{i}]"
        declared = next((d for d in self.inputs if d.name == t.name), None)
        if declared is None:
            raise ProtocolError(400, f"{where}.name is not an input of model '{self.name}' (it has: {', '.join(d.name for d in self.inputs)})")
        if t.datatype != declared.datatype:
            raise ProtocolError(400, f"{where}.datatype does not match: model input '{t.name}' is {declared.datatype} (no conversion is made)")
        if len(t.shape) != len(declared.shape) or any(d != -1 and d != g for d, g in zip(declared.shape, t.shape)):
            raise ProtocolError(400, f"{where}.shape does not match the model input '{t.name}' {declared.shape} (-1: any size)")


def element_count(shape: list[int]) -> int:
    """Elements in a tensor of `shape`, as an exact integer (no int64 overflow: ``[2**62, 1, 8, 8]`` is 2**68)."""
    return math.prod(shape)


def decode_request(body: bytes, header_length: str | None,
                   model: ModelMetadata | None = None) -> tuple[InferenceRequest, dict[str, np.ndarray]]:  # fmt: skip
    """The request and its input tensors (numpy, in their declared dtype and shape); `ProtocolError` (400) if bad.

    With `model`, every input is checked against the model's declaration before its data is read
    (`ModelMetadata.check_input`), and every requested output must exist."""
    json_end = len(body)
    if header_length is not None:
        try:
            json_end = int(header_length)
        except ValueError:
            raise ProtocolError(400, f"header '{HEADER_LENGTH}' must be an integer") from None
        if not 0 < json_end <= len(body):
            raise ProtocolError(400, f"header '{HEADER_LENGTH}' is outside the body's {len(body)} bytes")
    try:
        raw = orjson.loads(body[:json_end] if json_end < len(body) else body)
    except orjson.JSONDecodeError:
        raise ProtocolError(400, "the request body is not valid JSON") from None
    try:
        req = InferenceRequest.model_validate(raw)
    except ValidationError as e:
        raise ProtocolError(400, str(invalid(e, "invalid inference request"))) from None
    if model is not None:
        model.check_outputs(req)
    tensors: dict[str, np.ndarray] = {}
    seen: set[str] = set()
    offset = json_end
    for i, t in enumerate(req.inputs):
        where = f"inputs[{i}]"
        dtype = DATATYPES.get(t.datatype)
        if dtype is None:
            raise ProtocolError(400, f"{where}.datatype is not one of {', '.join(DATATYPES)}")
        if any(d < 0 for d in t.shape):
            raise ProtocolError(400, f"{where}.shape must not have negative dimensions")
        if t.name in seen:
            raise ProtocolError(400, f"{where}.name: input '{t.name}' is given twice")
        seen.add(t.name)
        if model is not None:
            model.check_input(i, t)
        count = element_count(t.shape)
        if count > len(body):  # every encoding (JSON text, raw bytes) takes at least a byte per element
            raise ProtocolError(400, f"{where}.shape needs {count} elements, more than the {len(body)}-byte body holds")
        size = (t.parameters or {}).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size != count * dtype.itemsize or offset + size > len(body):
                raise ProtocolError(400, f"{where}.parameters.binary_data_size does not match its shape, datatype or the body")
            arr = np.frombuffer(body, dtype=dtype, count=count, offset=offset)
            offset += size
        else:
            if t.data is None:
                raise ProtocolError(400, f"{where}.data is missing (and no binary_data_size was given)")
            try:
                arr = np.asarray(t.data, dtype=dtype)
            except (ValueError, TypeError, OverflowError):
                raise ProtocolError(400, f"{where}.data must hold {t.datatype} numbers") from None
            if arr.size != count:
                raise ProtocolError(400, f"{where}.data has {arr.size} elements but its shape needs {count}")
        tensors[t.name] = arr.reshape(t.shape)
    if offset != len(body):
        raise ProtocolError(400, "the body has binary data no input claims")
    missing = [d.name for d in (model.inputs if model is not None else ()) if d.name not in tensors]
    if missing:
        raise ProtocolError(400, f"inputs: model '{model.name}' needs input '{missing[0]}'")  # type: ignore[union-attr]
    return req, tensors


def encode_response(
    req: InferenceRequest, model: str, outputs: dict[str, np.ndarray], version: str = MODEL_VERSION
) -> tuple[bytes, dict[str, str]]:
    """The response body and its extra headers (the binary extension's header when any output is binary)."""
    head: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": []}
    if req.id is not None:
        head["id"] = req.id
    blobs: list[bytes] = []
    for name, arr in outputs.items():
        entry: dict[str, Any] = {"name": name, "datatype": datatype_of(arr.dtype), "shape": list(arr.shape)}
        if req.binary_output(name):
            blob = np.ascontiguousarray(arr).tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = arr.reshape(-1).tolist()
        head["outputs"].append(entry)
    js = orjson.dumps(head)
    if not blobs:
        return js, {"content-type": "application/json"}
    return b"".join([js, *blobs]), {"content-type": "application/octet-stream", HEADER_LENGTH: str(len(js))}


def triton_config(meta: ModelMetadata, *, batched: bool, max_batch_size: int, preferred_batch: int, max_delay_ms: float,
                  instances: int, gpu: bool) -> dict[str, Any]:  # fmt: skip
    """Triton's model configuration (``GET /v2/models/{name}/config``, its JSON form) for `meta`.

    `batched`: the first dimension is the batch axis (``max_batch_size`` > 0 and ``dims`` without it, as Triton
    writes them); otherwise ``max_batch_size`` is 0 and ``dims`` are the full shapes. Dims are JSON integers."""

    def tensors(ts: list[TensorMetadata]) -> list[dict[str, Any]]:
        return [{"name": t.name, "data_type": f"TYPE_{t.datatype}", "dims": t.shape[1:] if batched else t.shape} for t in ts]

    config: dict[str, Any] = {
        "name": meta.name, "platform": meta.platform, "backend": "onnxruntime",
        "version_policy": {"specific": {"versions": [int(v) for v in meta.versions]}},
        "max_batch_size": max_batch_size if batched else 0,
        "input": tensors(meta.inputs), "output": tensors(meta.outputs),
        "instance_group": [{"name": meta.name, "kind": "KIND_GPU" if gpu else "KIND_CPU", "count": instances}],
    }  # fmt: skip
    if batched:
        config["dynamic_batching"] = {"preferred_batch_size": [preferred_batch], "max_queue_delay_microseconds": round(max_delay_ms * 1e3)}
    return config
