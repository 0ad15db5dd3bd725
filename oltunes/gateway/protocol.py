"""The Open Inference Protocol (KServe v2 REST), as far as OLTunes serves it: typed tensors in, typed tensors out.

Requests are JSON (``{"inputs": [{"name", "shape", "datatype", "data"}], "outputs"?, "id"?, "parameters"?}``) or
JSON plus raw tensor bytes (Triton's binary extension: header ``Inference-Header-Content-Length`` gives the JSON
size, each input's ``parameters.binary_data_size`` its bytes, in order), which is what ``tritonclient`` sends by
default. Responses follow the request: binary outputs when asked (``binary_data_output`` or an output's
``binary_data``), JSON ``data`` otherwise. Errors are ``{"error": "<message>"}``; a message names the field and
never repeats the input.
"""

from __future__ import annotations

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


class ModelMetadata(_Strict):
    name: str
    versions: list[str] = ["1"]
    platform: str = "onnxruntime_onnx"
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


def decode_request(body: bytes, header_length: str | None) -> tuple[InferenceRequest, dict[str, np.ndarray]]:
    """The request and its input tensors (numpy, in their declared dtype and shape); `ProtocolError` (400) if bad."""
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
    tensors: dict[str, np.ndarray] = {}
    offset = json_end
    for i, t in enumerate(req.inputs):
        where = f"inputs[{i}]"
        dtype = DATATYPES.get(t.datatype)
        if dtype is None:
            raise ProtocolError(400, f"{where}.datatype is not one of {', '.join(DATATYPES)}")
        if any(d < 0 for d in t.shape):
            raise ProtocolError(400, f"{where}.shape must not have negative dimensions")
        count = int(np.prod(t.shape)) if t.shape else 1
        size = (t.parameters or {}).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size != count * dtype.itemsize or offset + size > len(body):
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
                raise ProtocolError(400, f"{where}.data has {arr.size} elements but its shape {t.shape} needs {count}")
        tensors[t.name] = arr.reshape(t.shape)
    if offset != len(body):
        raise ProtocolError(400, "the body has binary data no input claims")
    return req, tensors


def encode_response(
    req: InferenceRequest, model: str, outputs: dict[str, np.ndarray], version: str = "1"
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
