"""`gavel-like`: heterogeneity-aware max-throughput allocation (after Gavel's max-throughput policy).

Gavel does not choose model variants: the job runs its default (most accurate) variant, at the largest batch whose
profiled p99 meets the SLO. Each job goes to the accelerator type where its throughput, normalised by its mean
throughput over the cluster's types, is highest (the job that gains most from a fast GPU gets it); devices are
space-shared (packing onto the least-occupied device of that pool). Re-decided every round, like Gavel's rounds.
"""

from __future__ import annotations

import numpy as np

from oltunes.policies.base import Policy
from oltunes.types import ClusterState, Decision, JobSpec, Placement


class GavelLike(Policy, name="gavel-like"):
    needs_profile = True
    adaptive = True

    def decide(self, job: JobSpec, state: ClusterState, current: Placement | None = None) -> Decision | None:
        variant = self.default_variant(job)
        if variant is None:
            return None
        cluster = self.view(state)
        per_type = {}
        for p in cluster.pools:
            acc = p.accelerator.name
            if acc not in per_type:
                g = self.ctx.profile.grid(job, acc, [variant], self.ctx.batch_sizes, (1,))
                ok = np.flatnonzero(g.p99_batch_ms[0, :, 0] <= job.slo_ms)
                b = int(ok[-1]) if len(ok) else 0
                per_type[acc] = (float(g.capacity_rps[0, b, 0]), b, g)
        mean = float(np.mean([v[0] for v in per_type.values()]))
        best = None
        for p in cluster.pools:
            dev = cluster.least_loaded_device(p.name)
            if dev is None:
                continue
            thr, b, g = per_type[p.accelerator.name]
            score = thr / mean
            if best is None or score > best[0]:
                best = (score, p.name, dev, b, g)
        if best is None:
            return None
        _, pool, dev, b, g = best
        return self.decision(job, cluster, pool, dev, variant, int(g.batches[b]), 1, predicted=g.prediction((0, b, 0)))
