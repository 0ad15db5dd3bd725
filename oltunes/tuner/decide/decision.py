"""A selector's choice made a `Decision`: its source, its co-location group and its explanation.

* **source** — ``explore`` for an exploration draw, else ``model`` once the chosen accelerator has
  ``MIN_MODEL_OBS`` measurements of the job's family, else ``prior``.
* **group** — joining a device that runs jobs: the members and this job, with their predicted slowdowns (this
  job's: its latency there over its latency alone on the device); staying alone on the current device: a
  one-member group, so the launcher keeps that device.
* **explanation** — the prediction, the runner-ups and a note (`oltunes.tuner.decide.explain`).
"""

from __future__ import annotations

import math
import numpy as np

from oltunes.learner.features import job_context
from oltunes.tuner.decide import explain
from oltunes.tuner.decide.constraints import Verdict
from oltunes.tuner.decide.corunners import LOAD_LEVELS, load_level
from oltunes.tuner.model.estimate import LAT, Estimate, Estimator
from oltunes.tuner.decide.objectives import Objective
from oltunes.tuner.decide.selection import Choice, Selector
from oltunes.tuner.decide.trials import rank_trials
from oltunes.types import ColocationGroup, Decision

__all__ = ["MIN_MODEL_OBS", "DecisionBuilder"]

MIN_MODEL_OBS = 5  # a region with fewer measurements is still "prior" territory (Decision.source)


class DecisionBuilder:
    """``build(est, verdict, objective, obj, choice)``: the decision for ``choice`` on a scored grid."""

    def __init__(self, estimator: Estimator, *, selector: Selector) -> None:
        self.estimator = estimator
        self.selector = selector  # its near-equal band and tie-breaks are what the explanation states
        self.stay_tolerance = selector.stay_tolerance

    def build(self, est: Estimate, verdict: Verdict, objective: Objective, obj: np.ndarray,
              choice: Choice) -> Decision:
        """The decision for ``choice``."""
        job, idx = est.job, choice.idx
        p, v, _, _ = idx
        opt, variant = est.options[p], est.variants[v]
        if choice.explored:
            source = "explore"
        else:
            n_region = self.estimator.region_count(opt.pool.accelerator.name, job.family)
            source = "model" if n_region >= MIN_MODEL_OBS else "prior"
        cand = est.candidate(idx)
        group = None
        if opt.shared:
            alone = self.estimator.predict_log([job_context(job)],
                                               [cand.model_copy(update={"co_runners": ()})])[0, LAT]
            rate = job.arrival_rate_rps
            lv = (int(load_level(rate / est.thr[idx])) if job.kind == "streaming" and rate > 0
                  else len(LOAD_LEVELS) - 1)
            sd = est.extra["members"].slowdowns(p, variant.size, lv)
            own = float(math.exp(est.logp[LAT][idx] - alone))
            sd[job.job_id] = own
            group = ColocationGroup(pool=opt.pool.name, device=opt.device,
                                    members=(*(m.job_id for m in opt.members), job.job_id), predicted_slowdown=sd)
        elif choice.stayed:  # alone on its current device: a one-member group keeps the launcher on that device
            group = ColocationGroup(pool=opt.pool.name, device=opt.device, members=(job.job_id,),
                                    predicted_slowdown={job.job_id: 1.0})
        text = explain.note(est, verdict, idx, source)
        if choice.stayed and verdict.n_feasible:
            text += f"; kept the current placement (within {self.stay_tolerance:.0%} of the best)"
        elif choice.stayed:
            text += "; kept the current placement (moving would not make it clearly less infeasible)"
        expl = explain.explanation(est, verdict, objective, obj, choice, self.selector, est.prediction(idx), text)
        trials = rank_trials(est, verdict, objective, obj, idx, job.trials) if job.trials else ()
        return Decision(job_id=job.job_id, candidate=cand, group=group, source=source,
                        feasible=bool(verdict.n_feasible), explanation=expl, trials=trials)
