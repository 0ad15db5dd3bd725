"""Gateway benchmark: added latency and throughput vs calling the worker directly, overload, live switches, memory.

All on loopback, bounded in time. One worker (``cnn-s-fp32``, ONNX Runtime CPU) behind a gateway running in its
own process (``python -m oltunes.gateway``), clients in this process, direct and through-gateway rounds alternating.
Pinning (``sched_setaffinity``, with two or more cores): the worker gets the last cores to itself; the client (a
lean pooled HTTP/1.1 client under uvloop, the same in both arms, in this process) and the gateway (its own
process) share the first. So the worker's CPU is the
same in both arms, and what the gateway costs shows as its own CPU per request (``cpu_ms_per_request``, from the
processes' CPU times) and as latency, not as the three processes starving each other on two cores.

- ``gateway_added_p99_ms``: median over rounds of p99(gateway) - p99(direct) at a fixed open-loop rate;
- ``gateway_throughput_ratio``: closed-loop saturation throughput through the gateway / direct (median of rounds);
- ``overload_*``: a worker whose model bounds it (``--overload-variant``, one item per session call), open loop
  through the gateway at 2x the
  worker's capacity (closed loop, measured straight at the worker); answered p99, goodput / that capacity, and
  the refusals (429 from admission control), and the CPU (in cores) the client, the gateway and the worker used
  meanwhile (``overload_cpu_cores``: the client's share is what it took from the gateway's core);
- ``failed_during_switches``, ``dropped``: ten live switches between two decisions (in-process gateway + supervisor,
  as the streaming flow runs them) under steady load; failed = error answers, dropped = no answer at all;
- ``max_rss_mb``: peak RSS of the gateway and the worker while 8 clients each send a 50 MB body at once;
- ``shadow_added_p99_ms``, ``shadow_failed``, ``shadow_answers_returned``: the same gateway with and without a
  shadow at the default share, side by side (`benchmarks.gateway_shadow`; ``--parts shadow`` runs only that).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import uvloop

from benchmarks import gateway_shadow
from benchmarks.common import median, parser, print_table, write_json
from oltunes.gateway.shadow import DEFAULT_SHARE
from oltunes.gateway.upstream import UpstreamPool
from oltunes.worker.stats import LatencyHistogram

MODEL = "cnn"
JSON_HEADERS = [(b"content-type", b"application/json")]


def _payload(meta: dict[str, Any]) -> Any:
    from oltunes.launchers.traffic import oip_payloads

    x = np.random.default_rng(0).normal(size=(64, 1, 8, 8)).astype(np.float32)
    return oip_payloads(x, meta)


class _Client:
    """A lean load generator (the gateway's own pooled HTTP/1.1 client): the same for direct and gateway rounds,
    cheap, so that on two cores the client does not take the CPU the servers are measured on, and kept across
    rounds, so no round pays for opening connections."""

    def __init__(self, url: str, payload: Any) -> None:
        self.base, self.payload = url, payload
        self.path = f"/v2/models/{MODEL}/infer".encode()
        self.pool = UpstreamPool(frozenset(), 15)
        self.bodies: list[tuple[int, bytes]] | None = None  # answers kept (request index, body) when a list
        self.reset()

    def reset(self) -> None:
        self.latency = LatencyHistogram()
        self.statuses: Counter = Counter()

    async def one(self, i: int) -> None:
        t0 = time.perf_counter()
        try:
            status, _, body = await self.pool.request(self.base, b"POST", self.path, JSON_HEADERS, self.payload(i), 30.0)
        except OSError as e:  # TimeoutError included
            self.statuses[type(e).__name__] += 1
            return
        self.statuses[status] += 1
        if self.bodies is not None and status == 200:
            self.bodies.append((i, body))
        if status == 200:
            self.latency.record((time.perf_counter() - t0) * 1e3)


async def _open_loop(client: _Client, rate: float, seconds: float, max_in_flight: int = 1024) -> dict[str, Any]:
    """`rate` requests per second for `seconds` at fixed arrival times (open loop: late answers do not slow it)."""
    client.reset()
    pending: set[asyncio.Task] = set()
    shed = 0
    t0 = time.perf_counter()
    for i in range(int(rate * seconds)):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(pending) >= max_in_flight:
            shed += 1
            continue
        task = asyncio.create_task(client.one(i))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.wait(pending)
    wall = time.perf_counter() - t0
    statuses = Counter(client.statuses)
    ok = statuses.pop(200, 0)
    return {"p99_ms": client.latency.percentile(99), "p50_ms": client.latency.percentile(50), "ok": ok,
            "failures": {str(k): v for k, v in statuses.items()}, "wall_s": wall, "shed": shed}  # fmt: skip


async def _closed_loop(client: _Client, clients: int, seconds: float) -> float:
    """Requests per second answered (200) by `clients` back-to-back clients."""
    client.reset()
    stop = time.perf_counter() + seconds

    async def one(k: int) -> None:
        i = k
        while time.perf_counter() < stop:
            await client.one(i)
            i += clients

    t0 = time.perf_counter()
    await asyncio.gather(*(one(k) for k in range(clients)))
    return client.statuses[200] / (time.perf_counter() - t0)


async def _side_by_side(worker_url: str, gw_url: str, payload: Any, pids: dict[str, int], args: Any) -> dict[str, Any]:
    """Alternating direct and gateway rounds: saturation throughput, CPU per request, p99 at a fixed rate."""
    direct, via = _Client(worker_url, payload), _Client(gw_url, payload)
    await _closed_loop(direct, args.clients, 0.5)  # open the connections both arms keep
    await _closed_loop(via, args.clients, 0.5)
    added, ratios, caps, direct_p99, gw_p99, rates = [], [], [], [], [], []
    cpu: dict[str, list[float]] = {"gateway": [], "worker_direct": [], "worker_via_gateway": [], "client": []}
    for _ in range(args.rounds):
        c0, t0 = _cpu_s(pids), time.perf_counter()
        cap_d = await _closed_loop(direct, args.clients, args.seconds)
        c1, t1 = _cpu_s(pids), time.perf_counter()
        cap_g = await _closed_loop(via, args.clients, args.seconds)
        c2, t2 = _cpu_s(pids), time.perf_counter()
        n_d, n_g = cap_d * (t1 - t0), cap_g * (t2 - t1)
        cpu["worker_direct"].append((c1["worker"] - c0["worker"]) / n_d * 1e3)
        cpu["client"].append((c1["client"] - c0["client"]) / n_d * 1e3)
        cpu["worker_via_gateway"].append((c2["worker"] - c1["worker"]) / n_g * 1e3)
        cpu["gateway"].append((c2["gateway"] - c1["gateway"]) / n_g * 1e3)
        caps.append(cap_d)
        ratios.append(cap_g / cap_d)
        # the fixed rate, but never above 60% of what the worker answers right now (a shared, busy machine)
        rate = min(args.rate, 0.6 * cap_g)
        rates.append(rate)
        d = await _open_loop(direct, rate, args.seconds)
        g = await _open_loop(via, rate, args.seconds)
        direct_p99.append(d["p99_ms"])
        gw_p99.append(g["p99_ms"])
        added.append(g["p99_ms"] - d["p99_ms"])
    direct.pool.close()
    via.pool.close()
    return dict(
        gateway_added_p99_ms=median(added), latency_rate_rps=median(rates), direct_p99_ms=median(direct_p99),
        gateway_p99_ms=median(gw_p99), gateway_throughput_ratio=median(ratios), capacity_rps=median(caps),
        throughput_ratios=ratios, added_p99_ms_by_round=added, cpu_ms_per_request={k: median(v) for k, v in cpu.items()},
    )  # fmt: skip


def _cpu_s(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        t = psutil.Process(pid).cpu_times()
        out[name] = t.user + t.system
    return out


def _pin(pid: int, cores: set[int]) -> None:
    if cores:
        os.sched_setaffinity(pid, cores)


def _cores() -> tuple[set[int], set[int]]:
    """(client + gateway cores, worker cores): the worker gets a core of its own when there are two or more."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return set(), set()
    return {cores[0]}, set(cores[1:])


def _start_gateway(routes: dict[str, str], cores: set[int], slo_ms: float | None = None,
                   extra: list[str] = []) -> tuple[subprocess.Popen, str]:  # fmt: skip
    argv = [sys.executable, "-m", "oltunes.gateway", *(a for n, u in routes.items() for a in ("--route", f"{n}={u}"))]
    argv += (["--slo-ms", str(slo_ms)] if slo_ms else []) + extra
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    _pin(proc.pid, cores)
    url = proc.stdout.readline().strip() if proc.stdout else ""
    if not url.startswith("http"):
        proc.kill()
        raise RuntimeError("gateway did not start")
    return proc, url


def _peak_rss_mb(pids: list[int], stop: threading.Event, out: dict[int, float]) -> None:
    procs = {p: psutil.Process(p) for p in pids}
    while not stop.is_set():
        for pid, pr in procs.items():
            try:
                out[pid] = max(out.get(pid, 0.0), pr.memory_info().rss / 2**20)
            except psutil.Error:
                pass
        time.sleep(0.02)


def _big_bodies(url: str, n: int, mb: int) -> list[str]:
    body = b"[" + b"0," * (mb * 2**19) + b"0]"
    outcomes: list[str] = []

    def one() -> None:
        try:
            r = httpx.post(f"{url}/v2/models/{MODEL}/infer", content=body, headers={"content-type": "application/json"}, timeout=60)
            outcomes.append(f"{r.status_code} ({len(r.content)} B)")
        except httpx.HTTPError as e:
            outcomes.append(type(e).__name__)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outcomes


async def _switches(model_path: str, variants: list[Any], rate: float, n_switches: int) -> dict[str, Any]:
    """Ten live switches behind an in-process gateway (as the streaming flow does) under steady load."""
    from oltunes.config import REPO_ROOT
    from oltunes.gateway import Gateway, GatewayServer
    from oltunes.inventory import load_inventory
    from oltunes.launchers import Launcher, WorkerSpec
    from oltunes.launchers.supervisor import ServeSupervisor
    from oltunes.launchers.traffic import LoadGenerator
    from oltunes.types import Candidate, Decision, Explanation, JobSpec, Prediction

    pool = load_inventory(REPO_ROOT / "infra/inventory.local.yaml")[0]
    job = JobSpec(job_id="bench-gw", kind="streaming", family=MODEL, slo_ms=1000)
    pred = Prediction(latency_p99_ms=1, energy_j_per_item=0.1, throughput_items_per_s=100)
    decisions = [Decision(job_id=job.job_id, candidate=Candidate(pool=pool.name, accelerator="cpu", variant=v, batch_size=b),
                          explanation=Explanation(predicted=pred, n_candidates=2, n_feasible=2))
                 for v, b in zip(variants, (8, 16), strict=False)]  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="oltunes-bench-gw-"))

    def spec_for(d: Decision, gen: int) -> WorkerSpec:
        return WorkerSpec(mode="serve", job=job, candidate=d.candidate, pool=pool, run_dir=work / f"gen-{gen}", max_delay_ms=2.0)

    gw = Gateway()
    route = gw.add(MODEL, job.slo_ms)
    sup = ServeSupervisor(Launcher.make("local"), route, spec_for)
    async with GatewayServer(gw) as srv:
        await sup.start(decisions[0])
        async with httpx.AsyncClient(timeout=30) as http:
            meta = (await http.get(f"{srv.url}/v2/models/{MODEL}")).json()
        seconds = 3.0 * n_switches + 6
        gen = LoadGenerator(srv.url, MODEL, np.arange(int(rate * seconds)) / rate, _payload(meta), max_in_flight=4096)
        traffic = asyncio.create_task(gen.run(asyncio.Event()))
        try:
            for k in range(n_switches):
                await asyncio.sleep(1.0)
                await sup.switch(decisions[(k + 1) % len(decisions)])
            await traffic
        finally:
            await sup.stop()
    return {"sent": gen.sent, "ok": gen.ok, "failed": gen.failed, "failures": dict(gen.failures),
            "switches": len(sup.switches), "drained": sum(r.drained for r in sup.switches),
            "gateway_retries": sum(s.value for m in gw.prom.retries.collect() for s in m.samples if s.name.endswith("_total")),
            "p99_ms": gen.latency.percentile(99)}  # fmt: skip


async def _capacity_then_overload(direct: _Client, via: _Client, args: Any, pids: dict[str, int]) -> tuple[float, dict[str, Any]]:
    """The worker's capacity (closed loop, straight to it: no admission control to refuse the probe's own queue),
    then 2x that through the gateway (after a short warm-up there, so its limit is measured), with the CPU each
    process used meanwhile (in cores: the client and the gateway share one)."""
    await _closed_loop(direct, args.clients, 0.5)
    capacity = median([await _closed_loop(direct, args.clients, args.seconds) for _ in range(args.rounds)])
    await _open_loop(via, 0.5 * capacity, 1.0)
    c0, t0 = _cpu_s(pids), time.perf_counter()
    over = await _open_loop(via, 2 * capacity, 2 * args.seconds, max_in_flight=4096)
    c1, wall = _cpu_s(pids), time.perf_counter() - t0
    over["cpu_cores"] = {k: (c1[k] - c0[k]) / wall for k in pids}
    direct.pool.close()
    via.pool.close()
    return capacity, over


def _overload(variants: list[Any], args: Any, front: set[int], back: set[int]) -> dict[str, Any]:
    """2x the service's capacity, through the gateway, on a worker whose model (not HTTP) is the bottleneck."""
    from oltunes.worker import serve_process

    heavy = next(v for v in variants if v.name == args.overload_variant)
    # one item per session call: the model bounds the worker, not its HTTP handling, so 2x its capacity is a rate the
    # client and the gateway can offer from their one core (the load measures admission, not the client)
    with serve_process(heavy.path, model_name=MODEL, max_batch=1, max_delay_ms=0.0, max_queue_ms=args.slo_ms) as worker:
        _pin(worker.pid, back)
        gw, gw_url = _start_gateway({MODEL: worker.url}, front, slo_ms=args.slo_ms)
        try:
            payload = _payload(httpx.get(f"{gw_url}/v2/models/{MODEL}").json())
            pids = {"client": os.getpid(), "gateway": gw.pid, "worker": worker.pid}
            capacity, over = uvloop.run(_capacity_then_overload(_Client(worker.url, payload), _Client(gw_url, payload), args, pids))
        finally:
            gw.terminate()
            gw.wait(10)
    return {"overload_variant": heavy.name, "overload_worker_capacity_rps": capacity, "overload_offered_rps": 2 * capacity,
            "overload_answered_p99_ms": over["p99_ms"], "overload_answered_p50_ms": over["p50_ms"],
            "overload_goodput_ratio": over["ok"] / over["wall_s"] / capacity,
            "overload_refusals": over["failures"], "overload_shed_by_client": over["shed"], "overload_slo_ms": args.slo_ms,
            "overload_cpu_cores": over["cpu_cores"]}  # fmt: skip


def _through_gateway(worker: Any, payload: Any, args: Any, front: set[int]) -> dict[str, Any]:
    """Direct vs through the gateway (added latency, throughput, CPU), then the big bodies' memory."""
    results: dict[str, Any] = {}
    gw, gw_url = _start_gateway({MODEL: worker.url}, front)
    try:
        pids = {"gateway": gw.pid, "worker": worker.pid, "client": os.getpid()}
        results.update(uvloop.run(_side_by_side(worker.url, gw_url, payload, pids, args)))
        results["pinning"] = {"client_and_gateway": sorted(front), "worker": sorted(set(os.sched_getaffinity(worker.pid)))}
        base = {p: psutil.Process(p).memory_info().rss / 2**20 for p in (gw.pid, worker.pid)}
        peaks: dict[int, float] = {}
        stop = threading.Event()
        sampler = threading.Thread(target=_peak_rss_mb, args=([gw.pid, worker.pid], stop, peaks))
        sampler.start()
        via_gw = _big_bodies(gw_url, 8, 50)
        direct = _big_bodies(worker.url, 8, 50)
        stop.set()
        sampler.join()
        results.update(max_rss_mb=max(peaks.values()), rss_before_mb={"gateway": base[gw.pid], "worker": base[worker.pid]},
                       rss_peak_mb={"gateway": peaks.get(gw.pid), "worker": peaks.get(worker.pid)},
                       big_body_outcomes={"gateway": sorted(set(via_gw)), "worker": sorted(set(direct))})  # fmt: skip
    finally:
        gw.terminate()
        gw.wait(10)
    return results


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=300.0, help="open-loop rate for the added-latency comparison")
    ap.add_argument("--seconds", type=float, default=6.0, help="length of each measured round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=128,
                    help="closed-loop clients: enough in flight that the worker stays busy (saturation) in both arms")  # fmt: skip
    ap.add_argument("--slo-ms", type=float, default=100.0, help="the SLO of the overload test (gateway and worker)")
    ap.add_argument("--variant", default="cnn-s-fp32", help="light model: the gateway's own cost shows most")
    ap.add_argument("--overload-variant", default="cnn-l-fp32", help="a model whose inference bounds the worker")
    ap.add_argument("--switch-rate", type=float, default=100.0)
    ap.add_argument("--switches", type=int, default=10)
    ap.add_argument("--shadow-variant", default="cnn-m-fp32", help="the shadow worker's model (answers unlike --variant's)")
    ap.add_argument("--parts", choices=("all", "shadow"), default="all", help="shadow: only the shadow side by side")
    args = ap.parse_args()

    from oltunes.config import get_settings
    from oltunes.worker import serve_process
    from oltunes.zoo import build_zoo, list_variants

    build_zoo(families=[MODEL])  # cached: a no-op when built
    variants = sorted((v for v in list_variants(get_settings().zoo_dir) if v.family == MODEL), key=lambda v: v.name)
    small = next(v for v in variants if v.name == args.variant)
    results: dict[str, Any] = {}
    front, back = _cores()
    _pin(os.getpid(), front)
    with serve_process(small.path, model_name=MODEL, max_delay_ms=2.0, max_queue_ms=args.slo_ms) as worker:
        _pin(worker.pid, back)
        payload = _payload(httpx.get(f"{worker.url}/v2/models/{MODEL}").json())
        if args.parts == "all":
            results.update(_through_gateway(worker, payload, args, front))
        rate = min(args.rate, 0.6 * results["capacity_rps"]) if "capacity_rps" in results else args.rate
        shadow_path = str(next(v for v in variants if v.name == args.shadow_variant).path)
        results.update(gateway_shadow.run(worker.url, shadow_path, payload, rate, args, front, back, client=_Client,
                                          open_loop=_open_loop, start_gateway=_start_gateway, pin=_pin))  # fmt: skip
    rows = [
        ("shadow_added_p99_ms", results["shadow_added_p99_ms"], f"≤ 1.0 at 2 × {rate / 2:.0f} req/s, {DEFAULT_SHARE:.0%} mirrored "
         f"(p99 {results['no_shadow_p99_ms']:.2f} -> {results['shadow_p99_ms']:.2f} ms; by round {[round(x, 2) for x in results['shadow_added_p99_ms_by_round']]})"),
        ("shadow_failed", results["shadow_failed"], f"= 0; mirror {results['shadow_mirror']}"),
        ("shadow_answers_returned", results["shadow_answers_returned"],
         f"= 0 of {results['shadow_answers_checked']} checked (matching neither: {results['shadow_primary_mismatches']}; "
         f"primary failures {results['shadow_primary_failed']})"),
    ]  # fmt: skip
    if args.parts == "all":
        results.update(_overload(variants, args, front, back))
        sw = asyncio.run(_switches(str(small.path), [small, next(v for v in variants if v.name == "cnn-m-fp32")], args.switch_rate, args.switches))
        results.update(failed_during_switches=sw["failed"], dropped=sw["sent"] - sw["ok"] - sw["failed"], switches=sw)
        capacity = results["capacity_rps"]
        rows = [
            ("gateway_added_p99_ms", results["gateway_added_p99_ms"], f"≤ 1.0 at {results['latency_rate_rps']:.0f} req/s (direct p99 {results['direct_p99_ms']:.2f} ms)"),
            ("gateway_throughput_ratio", results["gateway_throughput_ratio"], f"≥ 0.9 (direct {capacity:.0f} req/s, {args.clients} clients)"),
            ("gateway_cpu_ms_per_request", results["cpu_ms_per_request"]["gateway"], f"worker {results['cpu_ms_per_request']['worker_direct']:.3f}, client {results['cpu_ms_per_request']['client']:.3f}"),
            ("overload_answered_p99_ms", results["overload_answered_p99_ms"], f"≤ {2 * args.slo_ms:.0f} (2× SLO) at {results['overload_offered_rps']:.0f} req/s ({results['overload_variant']})"),
            ("overload_goodput_ratio", results["overload_goodput_ratio"], f"≥ 0.9; refusals {results['overload_refusals']}"),
            ("overload_cpu_cores: client", results["overload_cpu_cores"]["client"], f"gateway {results['overload_cpu_cores']['gateway']:.2f}, worker {results['overload_cpu_cores']['worker']:.2f} (client + gateway share core {sorted(front)})"),
            ("failed_during_switches", sw["failed"], f"= 0 over {sw['switches']} switches, {sw['sent']} requests"),
            ("dropped", results["dropped"], "= 0"),
            ("max_rss_mb", results["max_rss_mb"], f"8 × 50 MB bodies: {results['big_body_outcomes']}"),
            *rows,
        ]
    print_table("Gateway vs direct (medians of rounds)", ["metric", "value", "goal / context"], rows)
    write_json(args.json, {"benchmark": "gateway", "args": vars(args) | {"json": str(args.json)}, **results})


if __name__ == "__main__":
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    main()
