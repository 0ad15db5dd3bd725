"""``warm_up`` (run by the tuning service before it serves) leaves no kernel to compile for a real run."""

from __future__ import annotations

import importlib

KERNEL_MODULES = ("oltunes.learner.fm_kernels", "oltunes.learner.ftml_kernel", "oltunes.tuner.correction_kernels",
                  "oltunes.tuner.fit_kernels", "oltunes.tuner.explain_kernels")


def _signatures() -> dict[str, int]:
    out = {}
    for name in KERNEL_MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            kernel = getattr(module, attr)
            if hasattr(kernel, "signatures"):  # (constants are exported too)
                out[f"{name}.{attr}"] = len(kernel.signatures)
    return out


def test_warm_up_leaves_nothing_to_compile_for_simulated_runs():
    """After ``warm_up``, a tuner learning and deciding through simulated runs (streams and batch jobs, co-runners,
    jobs nothing can serve) compiles no kernel again: the warm-up passed the tuner's own types down every path."""
    from oltunes.policies import Policy
    from oltunes.sim.scenario import load_scenario
    from oltunes.simulation import context, prepare, simulator
    from oltunes.tuner.warmup import warm_up

    warm_up()
    before = _signatures()
    called = ("fm_kernels.grid_sum", "fm_kernels.part_sums",
              "fm_kernels.prefixed_unary", "ftml_kernel.ftml_rows", "ftml_kernel.fm_step", "fit_kernels.fit_around",
              "correction_kernels.add_measurements",
              "explain_kernels.pair_minima")  # (the rest run inside these)
    assert all(n for k, n in before.items() if k.split(".", 2)[2] in called), before
    for name in ("tiny", "light", "overloaded"):
        prep = prepare(load_scenario(name))
        sim = simulator(prep)
        sim.run(Policy.make("oltunes", ctx=context(prep, sim.model, sim.cluster)))
    assert _signatures() == before
