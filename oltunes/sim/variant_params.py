"""Published parameter counts and compute per inference of the profiled (proteus) model variants: architecture
metadata, not measurements.

``proteus/aggregate_profiled.csv`` lists latency and accuracy per variant but no model size. The size of an
architecture is public metadata a deployer knows before running anything (it is in the model card), so the
simulator sets it as ``Variant.params`` just as the model zoo does for its own variants: a cold tuner's prior
can then tell a ResNet-18 from a ResNet-152, and the learner can carry what it learns about one size of a family
to the others (``log_params``).

Sources (millions of parameters): ALBERT (Lan et al. 2020, Table 1); BERT (Devlin et al. 2019); BERT-tiny..medium
(Turc et al. 2019, google-research/bert README); RoBERTa (Liu et al. 2019); T5 (Raffel et al. 2020); GPT-2
(Radford et al. 2019, Hugging Face model cards); DenseNet, ResNet (torchvision model docs); EfficientNet (Tan & Le
2019, Table 2); MobileNet v1 width multipliers (Howard et al. 2017, Table 6); ResNeSt (Zhang et al. 2020; 14/26
from the GluonCV model zoo, approximate); YOLOv5 (ultralytics README).

Compute per inference (GFLOPs = 2 x multiply-adds, one item at the architecture's reference input), set as
``Variant.gflops``: with the parameter count it gives a variant's arithmetic intensity (FLOPs per parameter), which
tells a weight-reusing model (ALBERT shares one layer's weights across all its layers, a convolution reuses each
weight over the whole image) from one that reads each weight once per token (BERT, GPT-2, T5). Sources, 224 x 224
unless stated: ResNet, DenseNet (torchvision model docs, GFLOPS column, which counts multiply-adds: x 2);
EfficientNet (Tan & Le 2019, Table 2, at each model's own resolution 224-600: multiply-adds, x 2); MobileNet v1
(Howard et al. 2017, Table 6, mult-adds, x 2); ResNeSt (timm model cards ``resnest14d/26d/50d.gluon_in1k``,
``resnest269e``: GMACs, x 2; ResNeSt-269 at its 416 x 416); YOLOv5 (ultralytics README, "FLOPs @640 (B)", already
2 x multiply-adds, at 640 x 640). Transformers are *derived* from the architecture, not published: the forward pass
costs ~2 FLOPs per non-embedding parameter per token (Kaplan et al. 2020, Table 1, ``C_forward ~ 2N``), at a
reference length of ``SEQ_TOKENS`` (128) tokens; a layer of width ``h`` and feed-forward width ``f`` holds
``4 h^2 + 2 h f`` parameters (attention projections + feed-forward; biases and layer norms neglected), with the
published depths and widths: BERT / RoBERTa (L, h) = base (12, 768), large (24, 1024), tiny (2, 128), mini (4, 256),
small (4, 512), medium (8, 512); GPT-2 (12, 768), medium (24, 1024), large (36, 1280), XL (48, 1600); T5 encoder +
decoder (the decoder's layers add a cross-attention, ``4 h^2`` more), small (6 + 6, 512, f 2048), base (12 + 12, 768,
f 3072), large (24 + 24, 1024, f 4096), counting each token once through each stack; ALBERT shares one layer's weights
across its layers (Lan et al. 2020, Table 1): the compute is that of all ``L`` layers, (L, h) = base (12, 768),
large (24, 1024), xlarge (24, 2048), xxlarge (12, 4096), though it holds one layer's parameters. None of these is
fitted to a measurement.

Example
-------
>>> published_params("resnet50_v1")
25600000
>>> published_params("prajjwal1-bert-tiny") == published_params("prajjwal1/bert-tiny")
True
>>> published_params("unknown-model")
0
>>> published_gflops("resnet50_v1")
8.18
>>> round(published_gflops("albert-xxlarge-v2") / published_gflops("bert-large-uncased"), 1)  # 12 wide layers
8.0
>>> published_gflops("unknown-model")
0.0
"""

from __future__ import annotations

__all__ = ["GFLOPS", "PARAMS_M", "SEQ_TOKENS", "published_gflops", "published_params"]

# proteus ``Model`` name -> published parameter count in millions (sources in the module docstring).
PARAMS_M: dict[str, float] = {
    "albert-base-v2": 12, "albert-large-v2": 18, "albert-xlarge-v2": 60, "albert-xxlarge-v2": 235,
    "bert-base-uncased": 110, "bert-large-uncased": 340, "prajjwal1/bert-tiny": 4.4, "prajjwal1/bert-mini": 11.3,
    "prajjwal1/bert-small": 29.1, "prajjwal1/bert-medium": 41.7, "roberta-base": 125, "roberta-large": 355,
    "t5-small": 60, "t5-base": 220, "t5-large": 770, "gpt2": 124, "gpt2-medium": 355, "gpt2-large": 774,
    "gpt2-xl": 1558, "densenet121": 8.0, "densenet161": 28.7, "densenet169": 14.1, "densenet201": 20.0,
    "efficientnet-b0": 5.3, "efficientnet-b1": 7.8, "efficientnet-b3": 12, "efficientnet-b5": 30,
    "efficientnet-b7": 66, "mobilenet0.25": 0.47, "mobilenet0.5": 1.3, "mobilenet0.75": 2.6, "mobilenet1.0": 4.2,
    "resnest14": 10.6, "resnest26": 17.1, "resnest50": 27.5, "resnest269": 110.9, "resnet18_v1": 11.7,
    "resnet34_v1": 21.8, "resnet50_v1": 25.6, "resnet101_v1": 44.5, "resnet152_v1": 60.2, "yolov5n": 1.9,
    "yolov5s": 7.2, "yolov5m": 21.2, "yolov5l": 46.5, "yolov5x": 86.7,
}



def _either_spelling(table: dict[str, float]) -> dict[str, float]:
    """``table`` under its proteus names and as the simulator names variants, "/" replaced by "-"
    (``prajjwal1-bert-tiny``)."""
    return {**table, **{k.replace("/", "-"): v for k, v in table.items()}}


_BY_NAME = _either_spelling(PARAMS_M)


def published_params(model: str) -> int:
    """Published parameter count of a proteus model (either name spelling); 0 when unknown (= "not stated")."""
    return round(_BY_NAME.get(model, 0) * 1e6)


SEQ_TOKENS = 128  # the transformers' reference input length (BERT's usual fine-tuning length)


def _transformer_gflops(layers: int, width: int, ff: int | None = None, cross_layers: int = 0) -> float:
    """2 FLOPs per non-embedding parameter per token x ``SEQ_TOKENS`` (module docstring); ``cross_layers``: layers
    with a cross-attention besides (T5's decoder)."""
    ff = 4 * width if ff is None else ff
    per_token = layers * (4 * width * width + 2 * width * ff) + cross_layers * 4 * width * width
    return round(2 * per_token * SEQ_TOKENS / 1e9, 2)


# proteus ``Model`` name -> GFLOPs per item (sources and derivations in the module docstring).
GFLOPS: dict[str, float] = {
    "resnet18_v1": 3.62, "resnet34_v1": 7.32, "resnet50_v1": 8.18, "resnet101_v1": 15.6, "resnet152_v1": 23.02,
    "densenet121": 5.66, "densenet161": 15.46, "densenet169": 6.72, "densenet201": 8.58,
    "efficientnet-b0": 0.78, "efficientnet-b1": 1.4, "efficientnet-b3": 3.6, "efficientnet-b5": 19.8,
    "efficientnet-b7": 74.0, "mobilenet0.25": 0.082, "mobilenet0.5": 0.298, "mobilenet0.75": 0.65,
    "mobilenet1.0": 1.14, "resnest14": 5.6, "resnest26": 7.2, "resnest50": 10.8, "resnest269": 155.4,
    "yolov5n": 4.5, "yolov5s": 16.5, "yolov5m": 49.0, "yolov5l": 109.1, "yolov5x": 205.7,
    **{name: _transformer_gflops(layers, width) for name, (layers, width) in {
        "bert-base-uncased": (12, 768), "bert-large-uncased": (24, 1024), "prajjwal1/bert-tiny": (2, 128),
        "prajjwal1/bert-mini": (4, 256), "prajjwal1/bert-small": (4, 512), "prajjwal1/bert-medium": (8, 512),
        "roberta-base": (12, 768), "roberta-large": (24, 1024), "gpt2": (12, 768), "gpt2-medium": (24, 1024),
        "gpt2-large": (36, 1280), "gpt2-xl": (48, 1600),
        # ALBERT: one layer's weights, all its layers' compute
        "albert-base-v2": (12, 768), "albert-large-v2": (24, 1024), "albert-xlarge-v2": (24, 2048),
        "albert-xxlarge-v2": (12, 4096)}.items()},
    "t5-small": _transformer_gflops(12, 512, 2048, cross_layers=6),
    "t5-base": _transformer_gflops(24, 768, 3072, cross_layers=12),
    "t5-large": _transformer_gflops(48, 1024, 4096, cross_layers=24),
}
_GFLOPS_BY_NAME = _either_spelling(GFLOPS)


def published_gflops(model: str) -> float:
    """Compute per item (GFLOPs) of a proteus model (either name spelling); 0.0 when unknown (= "not stated")."""
    return _GFLOPS_BY_NAME.get(model, 0.0)
