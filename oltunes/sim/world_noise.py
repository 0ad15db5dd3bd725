"""How far the real world strays from a profile table, per level, estimated from real disagreement in the store;
and the named worlds the simulator's truth is drawn from.

The truth's latency factor for variant ``v`` of family ``f`` on accelerator ``a`` is

    exp(z_a + z_fa + z_v + z_va),   z_level ~ N(0, sigma_level^2), each seeded by the names it belongs to

with the levels estimated as (:func:`estimate_sigmas`):

* ``accelerator``: the spread between MLPerf submitters running the same benchmark on the same accelerator type
  (offline throughput; systems, drivers, clocks, cooling): the median over groups of >= 3 submitters of the log sd;
* ``family``: how far a model family on one accelerator sits from the fitted model, beyond the accelerator
  (the sd over (family, accelerator) of the mean log residual);
* ``variant``: software spread: the same model, accelerator, precision and batch under different runtimes in
  NVIDIA's tables (PyTorch / TensorFlow / Triton), after each runtime's mean is removed (sd of the log latency);
* ``pair``: variant x accelerator interaction: the sd over (model, accelerator) of the mean log residual after its
  (family, accelerator) mean is removed.

The **grounded** world uses these; the **stress** world is the former default, one independent log-normal factor
per (variant, accelerator) with sigma 0.5, kept as a stress test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

LEVELS = ("accelerator", "family", "variant", "pair")
STRESS_SIGMA = 0.5


@dataclass(frozen=True)
class WorldSpec:
    """A named world: log-sigma per level (``pair`` alone = the independent stress world)."""

    name: str
    sigma: dict[str, float]

    def describe(self) -> str:
        return f"{self.name} world, sigma " + ", ".join(f"{k} {self.sigma.get(k, 0.0):.3f}" for k in LEVELS)


def stress_world(sigma: float = STRESS_SIGMA) -> WorldSpec:
    return WorldSpec("stress", {"accelerator": 0.0, "family": 0.0, "variant": 0.0, "pair": float(sigma)})


def _sd(x: pd.Series) -> float:
    return float(np.std(x.to_numpy(), ddof=1)) if len(x) > 1 else float("nan")


def estimate_sigmas(store: pd.DataFrame, residuals: pd.DataFrame) -> dict[str, float]:
    """Sigma per level from the store's rows and the fitted model's log residuals (module docstring)."""
    ml = store[(store["source"] == "mlperf-inference") & (store["scenario"] == "offline")
               & store["throughput_items_s"].notna()]
    g = ml.assign(lt=np.log(ml["throughput_items_s"])).groupby(["model", "accelerator", "precision"])["lt"]
    acc = [_sd(x) for _, x in g if len(x) >= 3]
    res = residuals.copy()
    fa = res.groupby(["family", "accelerator"])["log_err"].mean()
    pair = res.groupby(["family", "model", "accelerator"])["log_err"].mean()
    pair_dev = pair - fa.reindex(pair.droplevel("model").index).to_numpy()
    dle = store[(store["source"] == "nvidia-dle") & store["batch"].notna()].copy()
    dle["lat"] = np.log(dle["latency_avg_ms"].fillna(dle["latency_p90_ms"]))
    dle = dle[np.isfinite(dle["lat"])]
    dle["lat"] -= dle.groupby("runtime")["lat"].transform("mean") - dle["lat"].mean()
    spread = dle.groupby(["model", "accelerator", "precision", "batch"])["lat"].agg(["std", "size"])
    soft = spread.loc[spread["size"] >= 2, "std"]
    out = {
        "accelerator": float(np.median(acc)) if acc else float("nan"),
        "family": _sd(fa),
        "variant": float(np.median(soft)) if len(soft) else float("nan"),
        "pair": _sd(pair_dev[pair.groupby(level=["family", "accelerator"]).transform("size") > 1]),
    }
    return {k: round(v, 4) for k, v in out.items()}
