"""Published parameter counts of the profiled (proteus) model variants: architecture metadata, not measurements.

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

Example
-------
>>> published_params("resnet50_v1")
25600000
>>> published_params("prajjwal1-bert-tiny") == published_params("prajjwal1/bert-tiny")
True
>>> published_params("unknown-model")
0
"""

from __future__ import annotations

__all__ = ["PARAMS_M", "published_params"]

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

# The simulator names variants with "/" replaced by "-" (``prajjwal1-bert-tiny``); accept either spelling.
_BY_NAME = {**PARAMS_M, **{k.replace("/", "-"): v for k, v in PARAMS_M.items()}}


def published_params(model: str) -> int:
    """Published parameter count of a proteus model (either name spelling); 0 when unknown (= "not stated")."""
    return round(_BY_NAME.get(model, 0) * 1e6)
