"""PPO training of the queue policy against a baseline heuristic's score (RLScheduler/RLTune style).

An episode plays one training sequence; every decision with a choice to make is a step. An episode's return is how
much better than the baseline policy (FCFS by default) it scored on the objective, relative to the baseline's score,
so sequences of different difficulty weigh alike (see :func:`train` for how it is spread over the steps).
Deterministic for a seed (one torch thread, seeded numpy and torch).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.distributions import Categorical

from oltunes.errors import ConfigError
from oltunes.rltune.env import BatchQueueEnv
from oltunes.rltune.evaluate import OBJECTIVES, metrics, objective, wait_weights
from oltunes.rltune.features import MAX_VISIBLE, N_FEATURES
from oltunes.rltune.mapper import Mapper
from oltunes.rltune.net import PolicyNet, Snapshot
from oltunes.rltune.policies import QueuePolicy
from oltunes.rltune.traces import DEFAULT_LOAD, Trace, sequences

VALIDATION_SEED = 20_000  # validation sequences: drawn from the training part, apart from the training pool


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
    epochs: int = 10
    minibatch: int = 64
    entropy: float = 0.01
    hidden: int = 32
    gae: float = 0.95
    # the greedy policy is scored every `validate_every` iterations on sequences drawn apart from the training pool
    # (still from the first 70 %); training keeps the best and stops after `patience` checks without improvement
    validate_every: int = 5
    validation_sequences: int = 4
    patience: int = 4

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective {self.objective!r}; known: {', '.join(OBJECTIVES)}")
        QueuePolicy.lookup(self.baseline)
        Mapper.lookup(self.mapper)
        for name in ("iterations", "episodes_per_iteration", "train_sequences", "sequence_length", "epochs",
                     "minibatch", "hidden", "validate_every", "validation_sequences", "patience"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        if not (0 < self.load <= 100 and 0 < self.lr < 1 and 0 < self.clip < 1):
            raise ConfigError("load must be in (0, 100], lr and clip in (0, 1)")


def _episode(policy: Snapshot, seq: Trace, mapper: Mapper, weights: np.ndarray | None, rng: np.random.Generator
             ) -> tuple[BatchQueueEnv, list, list[float]]:
    """Play one sequence; per stored step: (obs, mask, action, logp, value) and the waiting cost accrued after it."""
    env = BatchQueueEnv(seq, mapper, wait_weight=weights)
    steps, costs = [], []
    while not env.done:
        cand = env.candidates()
        before = env.waiting_cost
        if cand.sum() == 1:  # no choice: not a training step
            env.choose(int(np.flatnonzero(cand)[0]), cand)
        else:
            view = env.view(cand)
            feats = view.features
            logits = np.where(cand, policy.logits(feats), -np.inf)
            logp = logits - logits.max()
            logp -= np.log(np.exp(logp).sum())
            a = int(rng.choice(len(logp), p=np.exp(logp)))
            n = len(view)
            obs = np.zeros((MAX_VISIBLE, N_FEATURES), np.float32)
            obs[:n] = feats
            mask = np.zeros(MAX_VISIBLE, bool)
            mask[:n] = cand
            steps.append((obs, mask, a, float(logp[a]), policy.value(feats, cand)))
            costs.append(0.0)
            env.choose(a, cand)
        if costs:  # cost accrued while a forced step ran belongs to the last real decision
            costs[-1] += env.waiting_cost - before
    return env, steps, costs


def _baseline(seq: Trace, cfg: TrainConfig, weights: np.ndarray | None) -> tuple[float, float]:
    env = BatchQueueEnv(seq, Mapper.make(cfg.mapper), wait_weight=weights)
    m = metrics(env.run(QueuePolicy.make(cfg.baseline)))
    return objective(m, cfg.objective), env.waiting_cost


def _relative_gain(policy: QueuePolicy, seq: Trace, cfg: TrainConfig, base_obj: float) -> float:
    m = metrics(BatchQueueEnv(seq, Mapper.make(cfg.mapper)).run(policy))
    return (base_obj - objective(m, cfg.objective)) / max(abs(base_obj), 1e-9)


def train(trace: Trace, cfg: TrainConfig, progress: Callable[[str], None] | None = None
          ) -> tuple[PolicyNet, dict]:
    """Train a policy on `trace`'s training part; returns the best validated one and the metadata saved beside its
    weights (``stop_reason`` says why training ended where it did). `progress` gets one line per iteration and per
    validation, and the stopping reason.

    Rewards: where the objective is a sum of weighted waiting times (slowdown, wait, turnaround) every decision
    is charged the waiting cost accrued until the next one, divided by the baseline's total, plus 1 at the end —
    so an episode's return is exactly (baseline - policy) / baseline, with credit where the waiting happened.
    Utilisation only has the terminal form. Sampled returns are noisy (a policy can fall back after a good
    iteration), so the greedy policy is validated every few iterations: the best is kept, and training stops once
    it has not improved for ``patience`` checks (no episodes spent after the policy stopped getting better).
    """
    from oltunes.rltune.policies import RLTune

    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    pool = sequences(trace, split="train", n=cfg.train_sequences, length=cfg.sequence_length, seed=cfg.seed,
                     load=cfg.load)
    val = sequences(trace, split="train", n=cfg.validation_sequences, length=cfg.sequence_length,
                    seed=VALIDATION_SEED + cfg.seed, load=cfg.load)
    val_base = [_baseline(seq, cfg, None)[0] for seq in val]
    base: dict[int, tuple[float, float]] = {}
    net = PolicyNet(cfg.hidden)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    history, validation = [], []
    best = (-np.inf, 0, {k: v.clone() for k, v in net.state_dict().items()})
    say = progress or (lambda _msg: None)
    stop_reason = f"ran all {cfg.iterations} iterations"
    for it in range(cfg.iterations):
        batch, scores = [], []
        policy = net.snapshot()
        for i in rng.choice(len(pool), size=cfg.episodes_per_iteration, replace=False):
            seq = pool[int(i)]
            weights = wait_weights(seq, cfg.objective)
            if int(i) not in base:
                base[int(i)] = _baseline(seq, cfg, weights)
            base_obj, base_wait = base[int(i)]
            env, steps, costs = _episode(policy, seq, Mapper.make(cfg.mapper), weights, rng)
            score = (base_obj - objective(metrics(env.outcome()), cfg.objective)) / max(abs(base_obj), 1e-9)
            scores.append(score)
            if not steps:
                continue
            if weights is not None:
                rewards = -np.asarray(costs) / max(base_wait, 1e-9)
                rewards[-1] += 1.0
            else:
                rewards = np.zeros(len(steps))
                rewards[-1] = score
            batch += [(*s, r) for s, r in zip(steps, _gae(rewards, np.array([s[4] for s in steps]), cfg.gae))]
        history.append(float(np.mean(scores)))
        if batch:
            _update(net, opt, batch, cfg, gen)
        say(f"iteration {it + 1}/{cfg.iterations}: reward vs {cfg.baseline} {history[-1]:+.3f} "
            f"({time.perf_counter() - t0:.0f} s)")
        if (it + 1) % cfg.validate_every == 0 or it + 1 == cfg.iterations:
            greedy = RLTune(snapshot=net.snapshot())
            validation.append(float(np.mean([_relative_gain(greedy, s, cfg, b) for s, b in zip(val, val_base)])))
            if validation[-1] > best[0]:
                best = (validation[-1], it + 1, {k: v.clone() for k, v in net.state_dict().items()})
            say(f"  validation after iteration {it + 1}: {validation[-1]:+.3f} vs {cfg.baseline} "
                f"(best {best[0]:+.3f}, after iteration {best[1]})")
            if it + 1 < cfg.iterations and (it + 1 - best[1]) >= cfg.patience * cfg.validate_every:
                stop_reason = (f"stopped early at iteration {it + 1} of {cfg.iterations}: validation has not improved "
                               f"on {best[0]:+.3f} (iteration {best[1]}) in {cfg.patience} checks, one every "
                               f"{cfg.validate_every} iterations (patience {cfg.patience})")
                break
    say(f"{stop_reason}; keeping the policy validated after iteration {best[1]}")
    net.load_state_dict(best[2])
    meta = {**asdict(cfg), "trace": trace.name, "train_seconds": round(time.perf_counter() - t0, 1),
            "train_cpu_seconds": round(time.process_time() - cpu0, 1),  # on a shared machine: the CPU it needed
            "reward_history": [round(x, 4) for x in history], "validation_history": [round(x, 4) for x in validation],
            "best_iteration": best[1], "iterations_run": len(history), "stop_reason": stop_reason,
            "torch": torch.__version__}
    net.eval()
    return net, meta


def _gae(rewards: np.ndarray, values: np.ndarray, lam: float) -> np.ndarray:
    """Returns (value targets) by GAE with no discount; the episode ends after the last step."""
    adv = np.zeros(len(rewards))
    last = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        nxt = values[t + 1] if t + 1 < len(rewards) else 0.0
        last = rewards[t] + nxt - values[t] + lam * last
        adv[t] = last
    return adv + values


def _update(net: PolicyNet, opt: torch.optim.Optimizer, batch: list, cfg: TrainConfig, gen: torch.Generator) -> None:
    masks = np.stack([b[1] for b in batch])
    # slots past the longest queue in the batch are padding for every step: the per-job network and the masked
    # critic ignore them, so the update drops them (queues are mostly far shorter than MAX_VISIBLE)
    width = int(np.flatnonzero(masks.any(axis=0)).max()) + 1
    obs = torch.from_numpy(np.stack([b[0][:width] for b in batch]))
    mask = torch.from_numpy(masks[:, :width])
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


def trained_weights(trace: Trace, cfg: TrainConfig, retrain: bool = False,
                    progress: Callable[[str], None] | None = None) -> Path:
    """Weights trained on `trace` with `cfg`, cached under ``$OLTUNES_HOME/rltune`` by a digest of both (so a
    changed trace file, cluster or setting trains again); `retrain` trains even when cached."""
    from oltunes.config import get_settings
    from oltunes.rltune.net import save_policy

    h = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode())
    for a in (trace.submit, trace.duration, trace.gpus, trace.allowed, trace.group):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr(trace.shape).encode())
    path = get_settings().home / "rltune" / f"{trace.name}-seed{cfg.seed}-{h.hexdigest()[:12]}.safetensors"
    if path.is_file() and not retrain:
        return path
    say = progress or (lambda _msg: None)
    say(f"training the rltune policy on {trace.name} ({cfg.iterations} iterations) -> {path}")
    net, meta = train(trace, cfg, progress=lambda msg: say(f"  {msg}"))
    return save_policy(net, path, meta)
