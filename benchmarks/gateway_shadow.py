"""The shadow part of ``benchmarks.gateway``: what mirroring a share of live requests to a shadow worker costs the
primary's requests, side by side in one run.

Two gateway processes in front of the same primary worker (``--variant``): one plain, one mirroring the default
share (`oltunes.gateway.shadow.DEFAULT_SHARE`) of the answered requests to a shadow worker running another variant
(``--shadow-variant``, whose answers differ). Each round sends half of a fixed open-loop rate through each at the
same time, so the load of the shared machine (and of the shared primary worker) is the same in both arms, and the
difference is what mirroring costs a primary request in the gateway. The shadow worker runs on the primary's
cores; its load there reaches both arms alike (a shadow is a co-runner of its device: the allocator's business).

- ``shadow_added_p99_ms``: median over rounds of p99(with shadow) - p99(without);
- ``shadow_failed``: shadow requests that got no 200 (the gateway's ``oltunes_gateway_shadow_requests`` gauge);
- ``shadow_answers_returned``: client answers that match the shadow's output for their input and not the
  primary's (every answer is decoded after its round and compared with both workers' answers, asked directly);
  ``primary_mismatches``: answers matching neither.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import orjson
from prometheus_client.parser import text_string_to_metric_families

from oltunes.gateway.shadow import DEFAULT_SHARE

MODEL = "cnn"
N_INPUTS = 64  # benchmarks.gateway._payload cycles over 64 items


def _logits(body: bytes) -> np.ndarray:
    return np.asarray(orjson.loads(body)["outputs"][0]["data"], dtype=np.float64)


def references(url: str, payload: Any) -> list[np.ndarray]:
    """Each input's answer straight from the worker at `url`."""
    with httpx.Client(timeout=30) as c:
        return [_logits(c.post(f"{url}/v2/models/{MODEL}/infer", content=payload(i),
                               headers={"content-type": "application/json"}).raise_for_status().content)
                for i in range(N_INPUTS)]  # fmt: skip


def classify(bodies: list[tuple[int, bytes]], primary: list[np.ndarray], shadow: list[np.ndarray]) -> dict[str, int]:
    """How many answers are the primary's, the shadow's (told apart by output), or neither."""
    out = {"primary": 0, "shadow": 0, "neither": 0}
    for i, body in bodies:
        got, k = _logits(body), i % N_INPUTS
        if np.allclose(got, primary[k], atol=1e-4):
            out["primary"] += 1
        elif np.allclose(got, shadow[k], atol=1e-4):
            out["shadow"] += 1
        else:
            out["neither"] += 1
    return out


def shadow_counts(gw_url: str) -> dict[str, float]:
    text = httpx.get(f"{gw_url}/metrics", timeout=10).text
    return {s.labels["outcome"]: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "oltunes_gateway_shadow_requests" and s.labels.get("model") == MODEL}  # fmt: skip


async def side_by_side(plain: Any, shadowed: Any, open_loop: Any, rate: float, seconds: float, rounds: int) -> dict[str, Any]:
    """Rounds through the plain and the shadowing gateway at once, half the rate each (`plain`, `shadowed`: the
    benchmark's clients; `open_loop(client, rate, seconds)` one arm's round): both arms see the same machine, so a
    busy shared host's hiccups land in both; p99s, the answers of the shadowing arm kept for `classify`."""
    await asyncio.gather(open_loop(plain, rate / 2, 1.0), open_loop(shadowed, rate / 2, 1.0))  # open the connections
    p99: dict[str, list[float]] = {"plain": [], "shadow": []}
    failed: dict[str, int] = {"plain": 0, "shadow": 0}
    bodies: list[tuple[int, bytes]] = []
    for _ in range(rounds):
        shadowed.bodies = []
        results = await asyncio.gather(open_loop(plain, rate / 2, seconds), open_loop(shadowed, rate / 2, seconds))
        for name, res in zip(("plain", "shadow"), results, strict=True):
            p99[name].append(res["p99_ms"])
            failed[name] += sum(res["failures"].values()) + res["shed"]
        bodies += shadowed.bodies
        shadowed.bodies = None
    return {"p99": p99, "failed": failed, "bodies": bodies}


def summary(run: dict[str, Any], refs: tuple[list[np.ndarray], list[np.ndarray]], counts: dict[str, float],
            rate: float) -> dict[str, Any]:  # fmt: skip
    from benchmarks.common import median

    kinds = classify(run["bodies"], *refs)
    added = [s - p for s, p in zip(run["p99"]["shadow"], run["p99"]["plain"], strict=True)]
    return {
        "shadow_added_p99_ms": median(added), "shadow_added_p99_ms_by_round": added,
        "shadow_p99_ms": median(run["p99"]["shadow"]), "no_shadow_p99_ms": median(run["p99"]["plain"]),
        "shadow_failed": int(counts.get("failed", 0)), "shadow_answers_returned": kinds["shadow"],
        "shadow_primary_mismatches": kinds["neither"], "shadow_answers_checked": len(run["bodies"]),
        "shadow_primary_failed": run["failed"], "shadow_rate_rps": rate, "shadow_share": DEFAULT_SHARE,
        "shadow_mirror": {k: int(v) for k, v in counts.items()},
    }  # fmt: skip


def run(worker_url: str, shadow_path: str, payload: Any, rate: float, args: Any, front: set[int], back: set[int], *,
        client: Any, open_loop: Any, start_gateway: Any, pin: Any) -> dict[str, Any]:  # fmt: skip
    """The whole shadow part (the benchmark's own client, round and gateway starter passed in)."""
    import uvloop

    from oltunes.worker import serve_process

    with serve_process(shadow_path, model_name=MODEL, max_delay_ms=2.0) as shadow:
        pin(shadow.pid, back)  # beside the primary: its load counts in the figure
        refs = references(worker_url, payload), references(shadow.url, payload)
        plain, plain_url = start_gateway({MODEL: worker_url}, front)
        mirrored, mirrored_url = start_gateway({MODEL: worker_url}, front, extra=["--shadow", f"{MODEL}={shadow.url}"])
        try:
            a, b = client(plain_url, payload), client(mirrored_url, payload)
            res = uvloop.run(side_by_side(a, b, open_loop, rate, args.seconds, args.rounds))
            a.pool.close()
            b.pool.close()
            counts = shadow_counts(mirrored_url)
        finally:
            for proc in (plain, mirrored):
                proc.terminate()
                proc.wait(10)
    return summary(res, refs, counts, rate)
