"""Property: whatever request reaches the gateway (a real gateway process in front of a real worker), it is
answered 2xx or 4xx, never 5xx, and every refusal is in the protocol's error shape. Requests are generated from the
protocol's own fields (paths, versions, tensors with any name, datatype, shape, data and binary sizes, requested
outputs, headers) plus raw bytes, so a class of bugs (an overflow, a cast, an unchecked field) shows up as one
failing example, shrunk."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow



def mostly(main: st.SearchStrategy, *others: st.SearchStrategy) -> st.SearchStrategy:
    """`main` three times in four, else one of `others` (``st.one_of`` would flatten nested choices and weigh each
    alike, so a request would seldom have the shape where the bugs live)."""
    return st.integers(0, 3).flatmap(lambda k: main if k else st.one_of(*others))


DATATYPES = ["FP32", "FP64", "FP16", "INT8", "INT32", "INT64", "UINT8", "BOOL", "BYTES", "fp32", "X", ""]
# powers of two, weighted to where a product overflows int64 (2**55..2**64), beside ordinary and huge dims
POWER_OF_TWO = mostly(st.integers(55, 64), st.integers(0, 64)).map(lambda k: 2**k)
DIM = st.one_of(st.integers(-2, 70), POWER_OF_TWO, st.sampled_from([2**63, 2**64 + 1, -(2**63)]), st.integers(-(2**80), 2**80))
SCALAR = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=32), st.integers(-(2**70), 2**70), st.booleans(),
                   st.text(max_size=3), st.none())  # fmt: skip
DATA = st.one_of(
    st.lists(SCALAR, max_size=70),
    st.lists(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), max_size=9), max_size=9),
    SCALAR,
    st.dictionaries(st.text(max_size=3), SCALAR, max_size=2),
)
PARAMETERS = st.one_of(
    st.none(),
    st.fixed_dictionaries({"binary_data_size": st.one_of(st.integers(-5, 300), st.sampled_from([2**63, 2**70]), st.text(max_size=2), st.booleans())}),
    st.dictionaries(st.text(max_size=5), SCALAR, max_size=2),
)
# shapes near the model's [-1, 1, 8, 8] (where the arithmetic and the casts happen) as well as anywhere
MODEL_LIKE = st.tuples(mostly(POWER_OF_TWO, DIM), st.just(1), st.just(8), st.just(8)).map(list)
SHAPE = mostly(MODEL_LIKE, st.lists(DIM, max_size=9), st.tuples(DIM, DIM, st.sampled_from([8, 64]), st.just(8)).map(list), SCALAR)
TENSOR = st.fixed_dictionaries(
    {"name": mostly(st.just("x"), st.sampled_from(["y", "", "logits"])), "shape": SHAPE,
     "datatype": mostly(st.just("FP32"), st.sampled_from(DATATYPES)),
     "data": mostly(st.sampled_from([[], [0.5] * 64, [0.5] * 128]), DATA)},
    optional={"parameters": PARAMETERS},
)  # fmt: skip
OUTPUT = st.fixed_dictionaries({"name": st.sampled_from(["logits", "probs", ""])},
                               optional={"parameters": st.fixed_dictionaries({"binary_data": st.one_of(st.booleans(), SCALAR)})})  # fmt: skip
REQUEST = st.fixed_dictionaries(
    {"inputs": mostly(st.lists(TENSOR, min_size=1, max_size=3), st.lists(TENSOR, max_size=0), SCALAR)},
    optional={"outputs": st.lists(OUTPUT, max_size=3), "id": st.one_of(st.text(max_size=5), st.integers()),
              "parameters": st.one_of(st.fixed_dictionaries({"binary_data_output": st.one_of(st.booleans(), SCALAR)}), SCALAR)},
)  # fmt: skip
INFER = "/v2/models/cnn/infer"
PATH = mostly(st.just(INFER), st.sampled_from(["/v2/models/cnn/versions/1/infer", "/v2/models/cnn/versions/2/infer",
                        "/v2/models/cnn/versions/%20/infer", "/v2/models/other/infer", "/v2/models/cnn", "/v2/models/cnn/config",
                        "/v2/models/cnn/versions/1/ready", "/v2/models/%2e%2e/infer", "/v2/models/cnn/infer/x", "/v2"]))


@pytest.fixture(scope="module")
def gateway(served):
    """One keep-alive client of the gateway for every generated example."""
    with httpx.Client(base_url=f"http://{served[0]}", timeout=30) as h:
        yield h


def _body(request: dict, binary_tail: bytes, header_cut: int | None) -> tuple[bytes, dict[str, str]]:
    js = json.dumps(request).encode()
    headers = {"content-type": "application/json"}
    if binary_tail or header_cut is not None:
        headers["inference-header-content-length"] = str(len(js) if header_cut is None else header_cut)
    return js + binary_tail, headers


@settings(max_examples=500, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(method=mostly(st.just("POST"), st.sampled_from(["GET", "PUT"])), path=PATH, request=REQUEST,
       binary_tail=st.one_of(st.just(b""), st.binary(max_size=300)), header_cut=st.one_of(st.none(), st.integers(-3, 400)))  # fmt: skip
def test_any_request_is_answered_2xx_or_4xx_never_5xx(gateway, method, path, request, binary_tail, header_cut):
    content, headers = _body(request, binary_tail, header_cut)
    r = gateway.request(method, path, content=content, headers=headers)
    assert r.status_code < 500, (r.status_code, r.text)
    if r.status_code >= 400:
        assert list(r.json()) == ["error"]


@settings(max_examples=100, deadline=None, database=None)
@given(content=st.binary(max_size=2000), path=PATH)
def test_raw_bytes_are_answered_2xx_or_4xx_never_5xx(gateway, content, path):
    r = gateway.post(path, content=content, headers={"content-type": "application/octet-stream"})
    assert r.status_code < 500, (r.status_code, r.text)

