"""The simulated cluster's co-runner view: what a measurement reports about the jobs sharing its device."""

from __future__ import annotations

from oltunes.inventory import CATALOG
from oltunes.sim.cluster import SimCluster
from oltunes.types import Candidate, CoRunner, Placement, Pool, Variant

VARIANTS = [Variant(family=f, name=f"{f}-m", size="m", accuracy=0.7) for f in ("cnn", "bert", "yolo")]


def _place(cl: SimCluster, jid: str, variant: Variant, batch: int, device: int = 0) -> Placement:
    cand = Candidate(pool="t4", accelerator="t4", variant=variant, batch_size=batch)
    pl = Placement(job_id=jid, pool="t4", device=device, candidate=cand, slo_ms=100.0)
    cl.place(pl)
    return pl


def _fresh(cl: SimCluster, device: int, exclude: str) -> tuple[CoRunner, ...]:
    """The co-runners built from scratch, as the cluster's placements and loads say now."""
    out = []
    for jid in cl.members("t4", device):
        if jid != exclude:
            c = cl.placements[jid].candidate
            out.append(CoRunner(job_id=jid, family=c.variant.family, variant=c.variant.name, size=c.variant.size,
                                precision=c.variant.precision, batch_size=c.batch_size,
                                load=min(1.0, max(0.0, cl.loads.get(jid, 0.0)))))
    return tuple(out)


def test_co_runners_follow_loads_and_placements_though_built_once_per_load():
    cl = SimCluster([Pool(name="t4", accelerator=CATALOG["t4"], count=2, slots_per_device=4)])
    for k, v in enumerate(VARIANTS):
        _place(cl, f"j{k}", v, batch=2 ** k)
    for step, loads in enumerate(([0.2, 0.5, 1.7], [0.2, 0.6, -0.1], [0.3, 0.6, 0.9])):
        cl.loads.update({f"j{k}": x for k, x in enumerate(loads)})
        views = {jid: cl.co_runners("t4", 0, exclude=jid) for jid in ("j0", "j1", "j2")}
        for jid, view in views.items():
            assert view == _fresh(cl, 0, jid), (step, jid)
        # one object per job and load: j2 is the same co-runner in j0's view and in j1's
        assert views["j0"][1] is views["j1"][1]
    # a job placed again (another batch size, same id) is reported as it runs now, not as it ran
    cl.remove("j1", keep_load=True)
    _place(cl, "j1", VARIANTS[1], batch=16)
    assert cl.co_runners("t4", 0, exclude="j0") == _fresh(cl, 0, "j0")
    assert cl.co_runners("t4", 0, exclude="j0")[1].batch_size == 16
    # moved to another device: gone from the first one's view, alone on the second
    cl.remove("j2")
    _place(cl, "j2", VARIANTS[2], batch=4, device=1)
    assert [c.job_id for c in cl.co_runners("t4", 0, exclude="j0")] == ["j1"]
    assert cl.co_runners("t4", 1, exclude="j2") == ()
    assert cl.co_runners("t4", 1)[0].load == 0.0  # its load was forgotten on removal


def test_state_lists_the_placements_in_their_order_after_any_moves():
    """``state()`` copies a list kept in step with the placements (not the dict): after any sequence of places,
    removals, moves, tenants and lost devices it lists exactly ``placements.values()``, in order, and a snapshot
    handed out never changes afterwards."""
    import numpy as np

    rng = np.random.default_rng(4)
    cl = SimCluster([Pool(name="t4", accelerator=CATALOG["t4"], count=40)])
    held = []  # (snapshot, what it listed when handed out)
    for step in range(400):
        placed = list(cl.placements)
        r = rng.random()
        if placed and r < 0.4:
            cl.remove(placed[int(rng.integers(len(placed)))])
        elif placed and r < 0.7:  # a re-tune: out of the list, back in at its end (maybe elsewhere)
            jid = placed[int(rng.integers(len(placed)))]
            old = cl.remove(jid, keep_load=True)
            dev = next((d for d in rng.permutation(cl.pool("t4").count) if cl.has_slot("t4", int(d))), None)
            if dev is not None:
                cl.place(old.model_copy(update={"device": int(dev)}))
        elif r < 0.72 and cl.pool("t4").count > 30:
            cl.lose_devices("t4", 1)
        else:
            dev = next((d for d in range(cl.pool("t4").count) if cl.has_slot("t4", d)), None)
            if dev is not None:
                _place(cl, f"j{step}", VARIANTS[step % 3], 1, dev)
        s = cl.state().placements
        assert len(s) == len(cl.placements) and all(a is b for a, b in zip(s, cl.placements.values()))
        assert cl.state().placements is s  # nothing changed: the same snapshot again
        held.append((s, list(s)))
    assert all(len(s) == len(was) and all(a is b for a, b in zip(s, was)) for s, was in held)
