"""Model families of the shipped zoo, registered by name (`Family.make("cnn")`).

Every family takes the same input, ``x`` float32 of shape (n, 1, 8, 8) with pixels in [0, 1], and returns
class scores (n, 10), so one dataset feeds every variant and the tuner can swap variants freely. The two
families have different compute profiles: convolutions over the image versus attention over its 8 rows.
Sizes s/m/l differ by roughly an order of magnitude in compute each step.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from oltunes.registry import Registered
from oltunes.zoo.spec import INPUT_SHAPE, N_CLASSES


class Family(Registered, root=True):
    """A model family: a torch module per size plus its training budget."""

    sizes: ClassVar[dict[str, dict[str, Any]]] = {}
    epochs: ClassVar[dict[str, int]] = {}
    lr: ClassVar[float] = 3e-3

    def module(self, size: str) -> nn.Module:
        raise NotImplementedError

    def config(self, size: str) -> dict[str, Any]:
        """Everything that determines the trained weights of one size (feeds the cache key)."""
        return {"family": self.name, "size": size, "arch": self.sizes[size], "epochs": self.epochs[size], "lr": self.lr}


class _ConvNet(nn.Module):
    def __init__(self, c1: int, c2: int, c3: int, hidden: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(1, c1, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        ]
        width = c2
        if c3:  # a third conv on the 4x4 map: the "l" size's extra depth
            layers += [nn.Conv2d(c2, c3, 3, padding=1), nn.ReLU()]
            width = c3
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(width * 16, hidden), nn.ReLU(), nn.Linear(hidden, N_CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class CNN(Family, name="cnn"):
    """Small conv net on the 8x8 image."""

    sizes = {
        "s": {"c1": 8, "c2": 16, "c3": 0, "hidden": 32},
        "m": {"c1": 24, "c2": 48, "c3": 0, "hidden": 64},
        "l": {"c1": 48, "c2": 96, "c3": 96, "hidden": 128},
    }
    epochs = {"s": 12, "m": 8, "l": 6}

    def module(self, size: str) -> nn.Module:
        return _ConvNet(**self.sizes[size])


class _Block(nn.Module):
    """Pre-norm transformer block written out by hand so it exports and quantises as plain MatMul/Softmax."""

    def __init__(self, dim: int, heads: int, ff: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, ff), nn.GELU(), nn.Linear(ff, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2) for z in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        att = torch.softmax(q @ k.transpose(-1, -2) * (d // h) ** -0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class _RowTransformer(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, ff: int) -> None:
        super().__init__()
        self.embed = nn.Linear(INPUT_SHAPE[2], dim)
        self.pos = nn.Parameter(torch.zeros(1, INPUT_SHAPE[1], dim))
        self.blocks = nn.Sequential(*[_Block(dim, heads, ff) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x.reshape(x.shape[0], INPUT_SHAPE[1], INPUT_SHAPE[2])) + self.pos
        return self.head(self.norm(self.blocks(tokens)).mean(dim=1))


class Transformer(Family, name="transformer"):
    """Tiny transformer: the image's 8 rows are the tokens."""

    sizes = {
        "s": {"dim": 32, "depth": 1, "heads": 2, "ff": 64},
        "m": {"dim": 64, "depth": 2, "heads": 4, "ff": 128},
        "l": {"dim": 128, "depth": 3, "heads": 4, "ff": 256},
    }
    epochs = {"s": 20, "m": 12, "l": 10}
    lr = 2e-3

    def module(self, size: str) -> nn.Module:
        return _RowTransformer(**self.sizes[size])
