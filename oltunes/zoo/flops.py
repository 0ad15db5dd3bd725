"""Compute per item of an ONNX model, counted from its graph: what ``Variant.gflops`` says of a zoo variant.

The multiply-adds of the graph's convolutions and matrix products (``Conv``, ``Gemm``, ``MatMul``: what dominates a
network's compute) at one item per batch, from ONNX shape inference, x 2 (FLOPs, as ``oltunes.sim.variant_params``
counts the profiled variants'). Everything else (activations, normalisations, pooling) is left out, as the published
figures leave it out. A graph whose shapes inference cannot resolve is "unknown" (0.0), never a guess.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # onnx is imported where a model is counted: reading the manifest needs none of it
    import onnx

__all__ = ["onnx_gflops"]


def _shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Static shape of every tensor the inference resolved (0 where a dimension is not known)."""
    g = model.graph
    out = {t.name: list(t.dims) for t in g.initializer}
    for vi in (*g.input, *g.value_info, *g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            out[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    return out


def _topological(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes with every producer before its consumers (shape inference reads them in order; the fp16
    converter appends its input casts at the end)."""
    ready = {t.name for t in (*graph.input, *graph.initializer)} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        left = []
        for n in pending:
            if set(n.input) <= ready:
                ordered.append(n)
                ready.update(n.output)
            else:
                left.append(n)
        if len(left) == len(pending):  # a cycle or a missing input: leave the rest as they were
            return ordered + left
        pending = left
    return ordered


def _macs(node: onnx.NodeProto, shapes: dict[str, list[int]]) -> int | None:
    """Multiply-adds of one node (0 for the ops not counted); None when a shape it needs is unknown."""
    if node.op_type not in ("Conv", "Gemm", "MatMul"):
        return 0
    out, a, w = (shapes.get(name) for name in (node.output[0], node.input[0], node.input[1]))
    if not out or not a or not w or 0 in out or 0 in a or 0 in w:
        return None
    if node.op_type == "Conv":  # each output element: C_in / groups x kernel multiply-adds
        return math.prod(out) * math.prod(w[1:])
    trans_a = any(attr.name == "transA" and attr.i for attr in node.attribute)
    inner = a[-2] if node.op_type == "Gemm" and trans_a else a[-1]
    return math.prod(out) * inner


def onnx_gflops(path: Path | str) -> float:
    """GFLOPs per item of the ONNX model at ``path`` (module docstring); 0.0 when it cannot be counted.

    Example
    -------
    >>> import numpy as np, onnx, tempfile
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> w = numpy_helper.from_array(np.zeros((64, 10), np.float32), "w")
    >>> graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], [w])
    >>> with tempfile.TemporaryDirectory() as d:
    ...     onnx.save(helper.make_model(graph), f"{d}/m.onnx")
    ...     onnx_gflops(f"{d}/m.onnx") * 1e9  # 2 x 64 x 10
    1280.0
    """
    import onnx

    try:
        model = onnx.load(str(path))
        # one item per batch: every symbolic dimension set to 1, and the shapes a converter left (with the
        # symbolic batch) inferred afresh from it
        model.graph.ClearField("value_info")
        nodes = _topological(model.graph)
        model.graph.ClearField("node")
        model.graph.node.extend(nodes)
        for vi in (*model.graph.input, *model.graph.output):
            for d in vi.type.tensor_type.shape.dim:
                if not d.HasField("dim_value"):
                    d.dim_value = 1
        shapes = _shapes(onnx.shape_inference.infer_shapes(model))
    except Exception:  # a file ONNX Runtime runs but onnx cannot infer (e.g. a custom op): unknown
        return 0.0
    total = 0
    for node in model.graph.node:
        macs = _macs(node, shapes)
        if macs is None:
            return 0.0
        total += macs
    return 2 * total / 1e9
