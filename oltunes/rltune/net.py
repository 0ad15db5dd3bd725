"""The policy network and its weights file (safetensors, with the training metadata; no pickle anywhere).

The actor scores every visible job with the same small MLP (a kernel network, as RLScheduler/RLTune: the score of a
job does not depend on its slot, so the policy is indifferent to queue order and length); padding slots are masked
out of the categorical distribution. The critic sees the mean and max of the visible jobs' features.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from oltunes.errors import ModelError
from oltunes.rltune.features import FEATURES, N_FEATURES

FORMAT = "oltunes-rltune-policy/1"


class PolicyNet(nn.Module):
    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.hidden = hidden
        self.actor = nn.Sequential(nn.Linear(N_FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, hidden // 2),
                                   nn.Tanh(), nn.Linear(hidden // 2, 1))
        self.critic = nn.Sequential(nn.Linear(2 * N_FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obs (B, slots, F), mask (B, slots) bool -> masked logits (B, slots), value (B)."""
        logits = self.actor(obs).squeeze(-1).masked_fill(~mask, -1e9)
        m = mask.unsqueeze(-1).float()
        mean = (obs * m).sum(1) / m.sum(1).clamp(min=1.0)
        mx = obs.masked_fill(~mask.unsqueeze(-1), -1.0).max(1).values
        return logits, self.critic(torch.cat([mean, mx], dim=-1)).squeeze(-1)

    def snapshot(self) -> Snapshot:
        return Snapshot(self)


class Snapshot:
    """The network's current weights as numpy arrays. Rollouts and evaluation score a few dozen jobs per decision:
    the tiny MLP costs microseconds in numpy and far more through torch's per-module call overhead."""

    def __init__(self, net: PolicyNet) -> None:
        def layers(seq: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray]]:
            return [(m.weight.detach().numpy().T.astype(np.float64), m.bias.detach().numpy().astype(np.float64))
                    for m in seq if isinstance(m, nn.Linear)]

        self.actor, self.critic = layers(net.actor), layers(net.critic)

    @staticmethod
    def _mlp(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
        for i, (w, b) in enumerate(layers):
            x = x @ w + b
            if i < len(layers) - 1:
                x = np.tanh(x)
        return x[..., 0]

    def logits(self, features: np.ndarray) -> np.ndarray:
        return self._mlp(self.actor, features) if len(features) else np.zeros(0)

    def value(self, features: np.ndarray, mask: np.ndarray) -> float:
        """The critic on the masked rows (as :meth:`PolicyNet.forward`)."""
        x = features[mask]
        return float(self._mlp(self.critic, np.concatenate([x.mean(axis=0), x.max(axis=0)])))


def save_policy(net: PolicyNet, path: Path, meta: dict) -> Path:
    from safetensors.torch import save_file

    from oltunes.atomic import atomic_write

    header = {"format": FORMAT, "hidden": str(net.hidden), "features": ",".join(FEATURES),
              "training": json.dumps(meta, sort_keys=True)}
    tensors = {k: v.detach().contiguous() for k, v in net.state_dict().items()}
    return atomic_write(Path(path), lambda tmp: save_file(tensors, str(tmp), metadata=header))


def load_policy(path: Path) -> tuple[PolicyNet, dict]:
    """The network and its training metadata; ModelError when the file is missing, foreign or corrupt."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file, safe_open

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"policy weights {path} not found (train with `oltunes rltune train`)")
    try:
        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelError(f"policy weights {path.name}: not a readable safetensors file ({type(e).__name__})") from None
    if header.get("format") != FORMAT or header.get("features") != ",".join(FEATURES):
        raise ModelError(f"policy weights {path.name}: format or feature list differs from this version's")
    try:
        net = PolicyNet(hidden=int(header["hidden"]))
        net.load_state_dict(tensors)
        meta = json.loads(header["training"])
    except (KeyError, ValueError, RuntimeError) as e:
        raise ModelError(f"policy weights {path.name}: tensors do not match the network ({type(e).__name__})") from None
    net.eval()
    return net, meta
