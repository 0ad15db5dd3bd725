"""PPO training of the queue policy against a baseline heuristic's score (RLScheduler/RLTune style).

An episode plays one training sequence; every decision with a choice to make is a step. The only reward comes at
the end: how much better than the baseline policy (FCFS by default) the episode scored on the objective, relative
to the baseline's score, so sequences of different difficulty weigh alike. With that terminal reward and no
discount every step's return is the episode's reward; the critic is the variance-reducing baseline.
Deterministic for a seed (one torch thread, seeded numpy and torch).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch.distributions import Categorical

from oltunes.errors import ConfigError
from oltunes.rltune.env import BatchQueueEnv
from oltunes.rltune.evaluate import OBJECTIVES, metrics, objective, play
from oltunes.rltune.features import MAX_VISIBLE, N_FEATURES
from oltunes.rltune.mapper import Mapper
from oltunes.rltune.net import PolicyNet
from oltunes.rltune.policies import QueuePolicy
from oltunes.rltune.traces import DEFAULT_LOAD, Trace, sequences


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    iterations: int = 30
    episodes_per_iteration: int = 4
    train_sequences: int = 64  # pool the episodes are drawn from (first 70 % of the trace)
    sequence_length: int = 256
    load: float = DEFAULT_LOAD
    objective: str = "bounded_slowdown"
    baseline: str = "fcfs"
    mapper: str = "greedy"  # placement is not what the policy learns; the MILP costs ~10x per decision
    lr: float = 3e-3
    clip: float = 0.2
    epochs: int = 4
    minibatch: int = 256
    entropy: float = 0.01
    hidden: int = 32

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective {self.objective!r}; known: {', '.join(OBJECTIVES)}")
        QueuePolicy.lookup(self.baseline)
        Mapper.lookup(self.mapper)
        for name in ("iterations", "episodes_per_iteration", "train_sequences", "sequence_length", "epochs",
                     "minibatch", "hidden"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        if not (0 < self.load <= 100 and 0 < self.lr < 1 and 0 < self.clip < 1):
            raise ConfigError("load must be in (0, 100], lr and clip in (0, 1)")


def _episode(net: PolicyNet, seq: Trace, mapper: Mapper, gen: torch.Generator) -> tuple[dict, list]:
    env = BatchQueueEnv(seq, mapper)
    steps = []
    while not env.done:
        view = env.view()
        n = len(view)
        if n == 1:
            env.choose(0)
            continue
        obs = np.zeros((MAX_VISIBLE, N_FEATURES), np.float32)
        obs[:n] = view.features
        mask = np.zeros(MAX_VISIBLE, bool)
        mask[:n] = True
        o, m = torch.from_numpy(obs)[None], torch.from_numpy(mask)[None]
        with torch.no_grad():
            logits, value = net(o, m)
            a = int(torch.multinomial(torch.softmax(logits[0], -1), 1, generator=gen))
            logp = float(torch.log_softmax(logits[0], -1)[a])
        steps.append((obs, mask, a, logp, float(value)))
        env.choose(a)
    return metrics(env.outcome()), steps


def train(trace: Trace, cfg: TrainConfig, progress: Callable[[int, float], None] | None = None
          ) -> tuple[PolicyNet, dict]:
    """Train a policy on `trace`'s training part; returns it and the metadata saved beside its weights."""
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    t0 = time.perf_counter()
    pool = sequences(trace, split="train", n=cfg.train_sequences, length=cfg.sequence_length, seed=cfg.seed,
                     load=cfg.load)
    base_cost: dict[int, float] = {}
    net = PolicyNet(cfg.hidden)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    history = []
    for it in range(cfg.iterations):
        batch, rewards = [], []
        for i in rng.choice(len(pool), size=cfg.episodes_per_iteration, replace=False):
            i = int(i)
            if i not in base_cost:
                base = metrics(play(pool[i], QueuePolicy.make(cfg.baseline), Mapper.make(cfg.mapper)))
                base_cost[i] = objective(base, cfg.objective)
            m, steps = _episode(net, pool[i], Mapper.make(cfg.mapper), gen)
            b = base_cost[i]
            r = (b - objective(m, cfg.objective)) / max(abs(b), 1e-9)
            rewards.append(r)
            batch += [(*s, r) for s in steps]
        history.append(float(np.mean(rewards)))
        if batch:
            _update(net, opt, batch, cfg, gen)
        if progress:
            progress(it + 1, history[-1])
    meta = {**asdict(cfg), "trace": trace.name, "train_seconds": round(time.perf_counter() - t0, 1),
            "reward_history": [round(x, 4) for x in history], "torch": torch.__version__}
    net.eval()
    return net, meta


def _update(net: PolicyNet, opt: torch.optim.Optimizer, batch: list, cfg: TrainConfig, gen: torch.Generator) -> None:
    obs = torch.from_numpy(np.stack([b[0] for b in batch]))
    mask = torch.from_numpy(np.stack([b[1] for b in batch]))
    act = torch.tensor([b[2] for b in batch])
    old_logp = torch.tensor([b[3] for b in batch])
    ret = torch.tensor([b[5] for b in batch], dtype=torch.float32)
    adv = ret - torch.tensor([b[4] for b in batch])
    adv = (adv - adv.mean()) / (adv.std() + 1e-8) if len(adv) > 1 else adv
    for _ in range(cfg.epochs):
        perm = torch.randperm(len(batch), generator=gen)
        for s in range(0, len(batch), cfg.minibatch):
            idx = perm[s:s + cfg.minibatch]
            logits, value = net(obs[idx], mask[idx])
            dist = Categorical(logits=logits)
            ratio = torch.exp(dist.log_prob(act[idx]) - old_logp[idx])
            a = adv[idx]
            pg = -torch.min(ratio * a, torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip) * a).mean()
            loss = pg + 0.5 * ((value - ret[idx]) ** 2).mean() - cfg.entropy * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            opt.step()
