"""From a trained torch module to ONNX files at each precision.

fp32 is exported with the torch.export-based exporter (the default since torch 2.9; the TorchScript one is
deprecated) with a dynamic batch axis and weights embedded in the file. fp16 and int8 are derived from
the fp32 file by precision converters registered by name (`Converter.make("int8")`):

* fp16: weights and compute in float16, inputs/outputs kept float32 so the same data feeds every variant.
* int8: static QDQ quantisation (uint8 activations, int8 per-channel weights) calibrated on training data;
  on CPU this is the fast int8 path (dynamic QInt8 is slower there).
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import warnings
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import torch

from oltunes.atomic import atomic_write
from oltunes.registry import Registered

INPUT_NAME = "x"
OUTPUT_NAME = "logits"
OPSET = 18


def export_fp32(module: torch.nn.Module, example: np.ndarray, path: Path) -> Path:
    """Export `module` to `path` (atomically) with a dynamic batch axis."""
    x = torch.from_numpy(np.ascontiguousarray(example[:4]))

    def _write(tmp: Path) -> None:
        # The exporter chats on stdout and warns about optional torchvision ops; neither is actionable here.
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _quiet("torch.onnx", "torch.export"):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                module,
                (x,),
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_shapes=({0: torch.export.Dim("batch")},),
                opset_version=OPSET,
                dynamo=True,
                external_data=False,
                verbose=False,
            )
        onnx.save_model(_strip_metadata(program.model_proto), str(tmp))

    return atomic_write(path, _write)


def _strip_metadata(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop the exporter's per-node stack traces and FX annotations.

    They embed source file paths and line numbers, so the same weights would give different bytes after a
    code reformat; without them the file depends only on the graph and the weights (and is smaller).
    """
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    del model.graph.metadata_props[:]
    return model


@contextlib.contextmanager
def _quiet(*loggers: str):
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in loggers]
    for lg, _ in saved:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in saved:
            lg.setLevel(level)


class Converter(Registered, root=True):
    """Derives a variant at one precision from the fp32 ONNX file."""

    precision: ClassVar[str] = ""

    def convert(self, fp32: Path, out: Path, calibration: np.ndarray) -> Path:
        raise NotImplementedError


class Fp32(Converter, name="fp32"):
    def convert(self, fp32: Path, out: Path, calibration: np.ndarray) -> Path:
        if fp32 != out:
            atomic_write(out, lambda tmp: shutil.copyfile(fp32, tmp))
        return out


class Fp16(Converter, name="fp16"):
    def convert(self, fp32: Path, out: Path, calibration: np.ndarray) -> Path:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "values clipped to fp16 range" is expected for tiny weights
            model = convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True)
        return atomic_write(out, lambda tmp: onnx.save_model(model, str(tmp)))


class _Calibration:
    """`CalibrationDataReader` over fixed batches: the same data in the same order gives the same scales."""

    def __init__(self, x: np.ndarray, batch: int = 64) -> None:
        self._batches = iter([{INPUT_NAME: np.ascontiguousarray(x[i : i + batch])} for i in range(0, len(x), batch)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


class Int8(Converter, name="int8"):
    # The compute-heavy ops; quantising LayerNorm/Softmax/Add as well costs accuracy and buys no speed on CPU.
    op_types = ["Conv", "MatMul", "Gemm"]

    def convert(self, fp32: Path, out: Path, calibration: np.ndarray) -> Path:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process

        reader = type("Reader", (_Calibration, CalibrationDataReader), {})(calibration)

        def _write(tmp: Path) -> None:
            pre = tmp.with_name(tmp.name + ".pre.onnx")
            try:
                with _quiet("root"):
                    quant_pre_process(str(fp32), str(pre), skip_symbolic_shape=True)
                    quantize_static(
                        str(pre),
                        str(tmp),
                        reader,
                        quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8,
                        per_channel=True,
                        op_types_to_quantize=self.op_types,
                    )
            finally:
                pre.unlink(missing_ok=True)

        return atomic_write(out, _write)
