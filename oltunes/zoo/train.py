"""Deterministic training of one zoo model (seeded, one CPU thread, deterministic algorithms)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from oltunes.worker.dataset import Dataset

BATCH_SIZE = 64


@contextmanager
def deterministic(seed: int) -> Iterator[torch.Generator]:
    """Seed torch, force deterministic kernels and one thread; restore the caller's settings afterwards.

    One thread makes the float reductions (and so the trained weights) identical on any machine,
    and keeps the build polite on a shared box.
    """
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    try:
        yield torch.Generator().manual_seed(seed)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)


def train(make: Callable[[], nn.Module], data: Dataset, epochs: int, lr: float, seed: int) -> nn.Module:
    """Build a module with `make` under the seed, train it (AdamW, one-cycle LR) on `data`; return it in eval mode."""
    x = torch.from_numpy(np.ascontiguousarray(data.x))
    y = torch.from_numpy(data.labels)
    with deterministic(seed) as gen:
        module = make()  # initialised under the seed: weights never depend on what ran before in this process
        opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=1e-4)
        steps = epochs * ((len(x) + BATCH_SIZE - 1) // BATCH_SIZE)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.2)
        loss_fn = nn.CrossEntropyLoss()
        module.train()
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x), BATCH_SIZE):
                idx = order[i : i + BATCH_SIZE]
                opt.zero_grad(set_to_none=True)
                loss_fn(module(x[idx]), y[idx]).backward()
                opt.step()
                sched.step()
    return module.eval()
