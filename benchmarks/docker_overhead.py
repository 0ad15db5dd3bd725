"""What a container costs: the same batch job and the same serve worker through the ``local`` and ``docker`` launchers.

Rounds alternate local/docker so machine noise hits both alike; the table gives medians and the docker ÷ local
ratio. Needs a Docker engine (``DOCKER_HOST``; ``infra/dockerd.sh start``) and the CPU worker image
(``infra/build-cpu-image.sh``); without them it says so and exits 0 (nothing was measured).

    python -m benchmarks.docker_overhead --items 20000 --rounds 3 --json benchmarks/results/docker_overhead.json
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import alternate, median, parser, print_table, write_json


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", default="cnn-s-fp32")
    args = ap.parse_args()

    from oltunes.config import apply_offline_env, get_settings
    from oltunes.errors import MissingDependency

    apply_offline_env()
    tmp = Path(tempfile.mkdtemp(prefix="oltunes-bench-docker-"))
    os.environ.setdefault("OLTUNES_HOME", str(tmp / "home"))
    get_settings.cache_clear()
    from oltunes.inventory import CATALOG
    from oltunes.launchers import Launcher, WorkerSpec, docker_adaptor
    from oltunes.types import Candidate, JobSpec, Pool
    from oltunes.zoo import build_zoo, get_variant, make_dataset

    try:
        client = docker_adaptor.connect()
        docker_adaptor.require_image(client, get_settings().worker_image)
    except MissingDependency as e:
        print(f"docker_overhead: not measured: {e}")
        return
    build_zoo(families=[args.variant.split("-")[0]])
    variant = get_variant(args.variant)
    data = make_dataset(variant.family, args.items, tmp / "in.parquet", seed=0)
    pool = Pool(name="cpu-1core", accelerator=CATALOG["cpu"], count=1, cpu_set=(0,))
    cand = Candidate(pool=pool.name, accelerator="cpu", variant=variant, batch_size=32)
    launchers = {"local": Launcher.make("local"), "docker": Launcher.make("docker")}
    counter = iter(range(10**6))

    def spec(mode: str) -> WorkerSpec:
        d = tmp / f"run-{next(counter)}"
        return WorkerSpec(
            mode=mode, job=JobSpec(family=variant.family, slo_ms=1000, items=args.items), candidate=cand, pool=pool,
            run_dir=d / "_run", input_path=data if mode == "batch" else None,
            output_dir=d / "out" if mode == "batch" else None, shard_size=5000,
        )  # fmt: skip

    def batch(name: str) -> float:
        t0 = time.perf_counter()
        launcher = launchers[name]
        launcher.wait(launcher.start(spec("batch")), timeout_s=1800)
        return time.perf_counter() - t0

    def ready(name: str) -> float:
        launcher = launchers[name]
        t0 = time.perf_counter()
        h = launcher.start(spec("serve"))
        try:
            launcher.ready(h, timeout_s=300)
            return time.perf_counter() - t0
        finally:
            launcher.stop(h, grace_s=10)

    walls = alternate({k: (lambda k=k: batch(k)) for k in launchers}, args.rounds)
    readies = alternate({k: (lambda k=k: ready(k)) for k in launchers}, args.rounds)
    rows = [
        [f"batch wall s ({args.items} items)", median(walls["local"]), median(walls["docker"]),
         median(walls["docker"]) / median(walls["local"])],
        ["serve start-to-healthy s", median(readies["local"]), median(readies["docker"]),
         median(readies["docker"]) / median(readies["local"])],
    ]  # fmt: skip
    print_table(f"docker vs local launcher ({variant.name}, 1 core, {args.rounds} rounds, medians)",
                ["measure", "local", "docker", "docker ÷ local"], rows)  # fmt: skip
    write_json(args.json, {"items": args.items, "variant": variant.name, "rounds": args.rounds,
                           "batch_wall_s": walls, "serve_ready_s": readies,
                           "ratios": {"batch_wall": rows[0][3], "serve_ready": rows[1][3]}})  # fmt: skip


if __name__ == "__main__":
    main()
