"""Published figures the grounded world's performance model starts from: accelerator datasheets and the compute and
weight size of the models the profile store measured. Metadata, not measurements; none of it is fitted.

Datasheets (dense, no sparsity; TFLOP/s or TOP/s, GB/s, W board power): NVIDIA's product datasheets for each GPU
(P100 PCIe 16 GB, T4, V100 SXM2, A100 SXM 80 GB, A100 PCIe 80 GB, A30, A40, A10, A2, L4, L40S, H100 SXM, H100 PCIe,
H100 NVL, H200 SXM, Jetson AGX Orin 64 GB, Quadro RTX 8000, GeForce RTX 3090 / 4090 (FP16 tensor with FP32
accumulate), RTX A6000, RTX 6000 Ada). ``fp32`` is the non-tensor-core rate; ``tf32`` / ``fp16`` / ``int8`` the
tensor-core rates (V100 and P100 have no TF32/INT8 tensor cores: their FP32 / FP16 rate stands in). An accelerator
whose figures are unknown (Proteus's two unidentified GPUs) has no entry: the fit gives it its own speed.

Models (GFLOPs = 2 x multiply-adds per item; weights in millions of parameters): ResNet-50 v1.5 4.1 GMACs, 25.6 M
(NVIDIA DeepLearningExamples model card); ResNeXt-101 32x4d 8.0 GMACs, 44.2 M and SE-ResNeXt-101 32x4d 8.0 GMACs,
49 M (same cards / Xie et al. 2017); EfficientNet-B0 0.39 GMACs, 5.3 M and B4 4.2 GMACs at 380 px, 19 M (Tan & Le
2019, Table 2); the "widese" EfficientNets are taken at their base model's compute (estimate: wider squeeze-excitation
adds parameters, little compute); BERT-large at 384 tokens and DeepLearningExamples' distilled 6-layer BERT (6
layers, 768 wide, 3072 feed-forward, from its NGC checkpoint name) at 384 tokens by the 2-FLOPs-per-parameter-per-token
rule (:mod:`oltunes.sim.variant_params`). RetinaNet (MLPerf) and the distilled 4-layer BERT have no stated compute:
their rows stay in the store, outside the fit. Proteus's variants take theirs from :mod:`oltunes.sim.variant_params`.
"""

from __future__ import annotations

from dataclasses import dataclass

from oltunes.sim.variant_params import _transformer_gflops, published_gflops, published_params


@dataclass(frozen=True)
class Datasheet:
    fp32: float
    tf32: float
    fp16: float
    int8: float
    bandwidth_gbs: float
    tdp_w: float

    def peak(self, precision: str) -> float:
        """Peak TFLOP/s (TOP/s) at ``precision``; unknown precisions get the FP32 rate."""
        return {"tf32": self.tf32, "fp16": self.fp16, "int8": self.int8}.get(precision, self.fp32)


DATASHEETS: dict[str, Datasheet] = {
    "p100": Datasheet(9.3, 9.3, 18.7, 18.7, 732, 250),
    "t4": Datasheet(8.1, 8.1, 65, 130, 320, 70),
    "v100": Datasheet(15.7, 15.7, 125, 125, 900, 300),
    "a100": Datasheet(19.5, 156, 312, 624, 2039, 400),
    "a100-pcie": Datasheet(19.5, 156, 312, 624, 1935, 300),
    "a30": Datasheet(10.3, 82, 165, 330, 933, 165),
    "a40": Datasheet(37.4, 74.8, 149.7, 299.3, 696, 300),
    "a10": Datasheet(31.2, 62.5, 125, 250, 600, 150),
    "a2": Datasheet(4.5, 9, 18, 36, 200, 60),
    "l4": Datasheet(30.3, 60, 121, 242, 300, 72),
    "l40s": Datasheet(91.6, 183, 362, 733, 864, 350),
    "h100": Datasheet(67, 495, 989, 1979, 3350, 700),
    "h100-pcie": Datasheet(51, 378, 756, 1513, 2000, 350),
    "h100-nvl": Datasheet(60, 418, 835, 1670, 3900, 400),
    "h200": Datasheet(67, 495, 989, 1979, 4800, 700),
    "orin": Datasheet(5.3, 10.6, 42.5, 85, 204.8, 60),
    "quadro-rtx8000": Datasheet(16.3, 16.3, 130.5, 261, 672, 260),
    "rtx3090": Datasheet(35.6, 35.6, 71, 284, 936, 350),
    "rtx4090": Datasheet(82.6, 82.6, 165, 660, 1008, 450),
    "rtx-a6000": Datasheet(38.7, 77.4, 154.8, 309.7, 768, 300),
    "rtx6000-ada": Datasheet(91.1, 182, 364, 728, 960, 300),
}

# Each GPU's architecture (a fact of the datasheet): a GPU nobody measured reaches the share of its peak that its
# measured siblings reach (GA10x and Ada datasheets count two FP32 lanes per core that dense models rarely fill).
ARCHITECTURE: dict[str, str] = {
    "p100": "pascal", "t4": "turing", "quadro-rtx8000": "turing", "v100": "volta",
    "a100": "ga100", "a100-pcie": "ga100", "a30": "ga100",
    "a40": "ga10x", "a10": "ga10x", "a2": "ga10x", "rtx3090": "ga10x", "rtx-a6000": "ga10x", "orin": "ga10x",
    "l4": "ada", "l40s": "ada", "rtx4090": "ada", "rtx6000-ada": "ada",
    "h100": "hopper", "h100-pcie": "hopper", "h100-nvl": "hopper", "h200": "hopper",
}

BYTES_PER_WEIGHT = {"fp32": 4, "tf32": 4, "fp16": 2, "int8": 1}

# store model -> (GFLOPs per item, millions of parameters)
STORE_MODELS: dict[str, tuple[float, float]] = {
    "resnet50": (8.2, 25.6),
    "resnext101-32x4d": (16.0, 44.2),
    "se-resnext101-32x4d": (16.0, 49.0),
    "efficientnet-b0": (0.78, 5.3),
    "efficientnet-b4": (8.4, 19.0),
    "efficientnet-widese-b0": (0.78, 8.0),
    "efficientnet-widese-b4": (8.4, 25.0),
    "bert-large-seq384": (_transformer_gflops(24, 1024) * 3, 340.0),  # 384 = 3 x the 128-token reference
    "bert-dist6l-seq384": (_transformer_gflops(6, 768, 3072) * 3, 67.0),
    "bert_large_squad": (_transformer_gflops(24, 1024) * 3, 340.0),  # lambda's SQuAD fine-tuning, 384 tokens
    "bert_base_squad": (_transformer_gflops(12, 768) * 3, 110.0),
}


# Input elements per item of a store model (an image's 3 x H x W at its stated resolution, at the row's precision; a
# BERT sequence's 384 token ids, segment ids and mask, int32): what a Triton request carries per item.
_IMAGE = {"resnet50": 224, "resnext101-32x4d": 224, "se-resnext101-32x4d": 224, "efficientnet-b0": 224,
          "efficientnet-widese-b0": 224, "efficientnet-b4": 380, "efficientnet-widese-b4": 380}


def input_mb(model: str, precision: str) -> float:
    """MB of input per item (0 when the model's input is not stated)."""
    if model in _IMAGE:
        return 3 * _IMAGE[model] ** 2 * BYTES_PER_WEIGHT.get(precision, 4) / 1e6
    if model.startswith("bert"):
        return 3 * 384 * 4 / 1e6
    return 0.0


def model_size(model: str) -> tuple[float, float] | None:
    """(GFLOPs per item, weight bytes at FP32 in MB) of a store model or a Proteus variant; None when unknown."""
    if model in STORE_MODELS:
        g, p = STORE_MODELS[model]
        return g, 4 * p
    g, p = published_gflops(model), published_params(model)
    if g > 0 and p > 0:
        return g, 4 * p / 1e6
    return None


def family_of(model: str) -> str:
    """A store or Proteus model's family: the name's leading letters (``resnet50_v1`` -> ``resnet``)."""
    name = model.split("/")[-1].lower()
    for fam in ("resnext", "resnest", "resnet", "se-resnext", "efficientnet", "mobilenet", "densenet", "yolov5",
                "albert", "roberta", "bert", "gpt2", "t5", "retinanet"):
        if name.startswith(fam):
            return fam
    return name.split("-")[0]
