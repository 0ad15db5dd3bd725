"""KServe v2 / Triton conformance of the front door, checked with the real `tritonclient` against a real gateway
process in front of a real worker on loopback: declared datatypes and shapes are enforced (no casts), requested
outputs must exist, versions other than the model's one are refused, and the model config answers."""

from __future__ import annotations

import json

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.slow


@pytest.fixture(params=["gateway", "worker"])
def client(request, served):
    """A Triton client of the gateway, and of the worker itself: both doors must hold."""
    return triton.InferenceServerClient(served[0] if request.param == "gateway" else served[1])


def _input(x: np.ndarray, datatype: str, binary: bool = True) -> triton.InferInput:
    inp = triton.InferInput("x", list(x.shape), datatype)
    inp.set_data_from_numpy(x, binary_data=binary)
    return inp


def _refused(fn, status: str) -> str:
    with pytest.raises(InferenceServerException) as e:
        fn()
    assert e.value.status() == status, e.value
    return e.value.message()


@pytest.mark.parametrize("binary", [True, False])
def test_a_conformant_request_is_answered_with_the_models_real_output(client, served, binary):
    x = np.random.default_rng(1).normal(size=(4, 1, 8, 8)).astype(np.float32)
    expected = ort.InferenceSession(str(served[2]), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    res = client.infer("cnn", [_input(x, "FP32", binary)], outputs=[triton.InferRequestedOutput("logits", binary_data=binary)])
    assert np.allclose(res.as_numpy("logits"), expected, atol=1e-5)
    assert res.get_response()["model_version"] == "1"
    res = client.infer("cnn", [_input(x, "FP32", binary)], model_version="1")  # the one version, named
    assert np.allclose(res.as_numpy("logits"), expected, atol=1e-5)


@pytest.mark.parametrize("dtype, datatype", [(np.float64, "FP64"), (np.float16, "FP16"), (np.int32, "INT32")])
def test_a_datatype_other_than_the_declared_one_is_refused_not_cast(client, dtype, datatype):
    x = np.zeros((2, 1, 8, 8), dtype=dtype)
    for binary in (True, False):
        msg = _refused(lambda: client.infer("cnn", [_input(x, datatype, binary)]), "400")
        assert "inputs[0].datatype" in msg and "FP32" in msg


@pytest.mark.parametrize("shape", [[4, 64], [64], [4, 1, 8, 8, 1], [4, 2, 8, 8], [4, 1, 64, 1]])
def test_a_shape_the_model_does_not_declare_is_refused(client, shape):
    x = np.zeros(shape, dtype=np.float32)
    msg = _refused(lambda: client.infer("cnn", [_input(x, "FP32")]), "400")
    assert "inputs[0].shape" in msg and "[-1, 1, 8, 8]" in msg


def test_an_unknown_requested_output_is_refused(client):
    x = np.zeros((1, 1, 8, 8), dtype=np.float32)
    msg = _refused(lambda: client.infer("cnn", [_input(x, "FP32")], outputs=[triton.InferRequestedOutput("Zq7-probs")]), "400")
    assert "outputs[0].name" in msg and "logits" in msg and "Zq7" not in msg


def test_versions_other_than_the_models_one_are_refused_everywhere(client):
    x = np.zeros((1, 1, 8, 8), dtype=np.float32)
    assert client.get_model_metadata("cnn", "1")["versions"] == ["1"]
    assert client.is_model_ready("cnn", "1") and not client.is_model_ready("cnn", "2")
    for call in (lambda: client.infer("cnn", [_input(x, "FP32")], model_version="2"),
                 lambda: client.get_model_metadata("cnn", "2"), lambda: client.get_model_config("cnn", "7")):  # fmt: skip
        assert "unknown version of model 'cnn'" in _refused(call, "404")


def test_the_model_config_answers_in_tritons_shape(client):
    for config in (client.get_model_config("cnn"), client.get_model_config("cnn", "1")):
        assert config["name"] == "cnn" and config["platform"] == "onnxruntime_onnx" and config["backend"] == "onnxruntime"
        assert config["max_batch_size"] == 4096  # the worker's items per request; dims leave the batch axis out
        assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [1, 8, 8]}]
        assert config["output"] == [{"name": "logits", "data_type": "TYPE_FP32", "dims": [10]}]
        assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 1000
        assert config["instance_group"][0]["kind"] == "KIND_CPU"


@pytest.mark.parametrize("door", [0, 1])
def test_malformed_tensors_get_400_in_the_protocols_error_shape(served, door):
    """Shapes whose element count overflows int64 (issue 31, case 7), zero items, an input given twice, a datatype
    the protocol does not know: each a 400 whose body is exactly ``{"error": ...}``, never a 500."""
    url = f"http://{served[door]}/v2/models/cnn/infer"

    def tensor(**kw):
        return {"name": "x", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.0] * 64, **kw}

    cases = {
        "overflowing shape, empty data": {"inputs": [tensor(shape=[2**62, 1, 8, 8], data=[])]},
        "overflowing shape, binary": {"inputs": [tensor(shape=[2**62, 1, 8, 8], data=None, parameters={"binary_data_size": 0})]},
        "huge dims": {"inputs": [tensor(shape=[2**70, 2**70, 8, 8], data=[])]},
        "zero items": {"inputs": [tensor(shape=[0, 1, 8, 8], data=[])]},
        "twice": {"inputs": [tensor(), tensor()]},
        "unknown datatype": {"inputs": [tensor(datatype="FP8")]},
    }
    with httpx.Client(timeout=30) as h:
        for case, body in cases.items():
            r = h.post(url, content=json.dumps(body).encode())  # the stdlib writes integers past 64 bits too
            assert r.status_code == 400, (case, r.status_code, r.text)
            assert list(r.json()) == ["error"] and r.json()["error"], case

