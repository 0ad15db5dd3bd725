"""A decision in MLflow: its explanation as artifacts (JSON and readable text), the chosen and would-have-chosen
candidates as tags, the readable text as the run's description, and the served variant's logged model as the
run's model output (see ``mlflow/README.md``).

* ``oltunes/decisions/<decision_id>.json`` — the whole `Decision` (candidate, group, explanation);
* ``oltunes/decisions/<decision_id>.txt`` — the explanation as ``docs/decisions.md`` reads it;
* tags ``oltunes.chosen`` (the chosen candidate's key), ``oltunes.would_have_chosen`` (the best feasible candidate on
  the objective alone, or ``the chosen``), ``oltunes.ranked_on``, ``oltunes.objective`` (the chosen's value);
* ``mlflow.note.content``: the readable text (the run page's *Description*).

Advisory mode (`Decision.advice`: the job ran its baseline): ``oltunes.chosen`` is what ran and
``oltunes.would_have_chosen`` the tuner's choice, with the tag ``oltunes.advisory`` and, as metrics
(`advice_metrics`), the predicted saving and the tuner's predictions for both beside the measured ones.
"""

from __future__ import annotations

from typing import Any

from oltunes.tracking import conventions as cv
from oltunes.tracking.filters import literal
from oltunes.types import Decision

__all__ = ["DECISIONS_DIR", "TAG_ADVISORY", "TAG_CHOSEN", "TAG_WOULD_HAVE_CHOSEN", "advice_metrics",
           "decision_artifacts", "decision_tags", "explanation_text", "link_served_model"]

DECISIONS_DIR = "oltunes/decisions"
TAG_CHOSEN = "oltunes.chosen"
TAG_WOULD_HAVE_CHOSEN = "oltunes.would_have_chosen"
TAG_RANKED_ON = "oltunes.ranked_on"
TAG_OBJECTIVE = "oltunes.objective"
TAG_ADVISORY = "oltunes.advisory"  # "true": the job ran its baseline; the tuner's choice is would_have_chosen
TAG_ADVISORY_RANKED_ON = "oltunes.advisory.ranked_on"  # the unit of the metric advisory_predicted_saving
TAG_NOTE = "mlflow.note.content"  # MLflow's run description
MAX_NOTE_CHARS = 5000  # under MLflow's tag value limit


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def explanation_text(d: Decision) -> str:
    """The decision as a person reads it: what was chosen and why, each runner-up with its numbers and reason."""
    e, c = d.explanation, d.candidate
    p = e.predicted
    lines = [
        f"Decision {d.decision_id} for job {d.job_id} ({d.source}, {'feasible' if d.feasible else 'INFEASIBLE'})",
        f"chosen: {c.key}",
        f"  predicted: p99 {p.latency_p99_ms:.4g} ms (+{p.margin_ms:.3g} ms margin), {p.energy_j_per_item:.4g} J/item "
        f"({p.energy_j_per_item * 1000:.4g} mJ/item), {p.throughput_items_per_s:.4g} items/s",
    ]
    if e.ranked_on:
        lines.append(f"  ranked on: {e.ranked_on} = {_num(e.objective)}; near-equal band {e.near_equal_band:.1%}")
    lines.append(f"would have chosen on the objective alone: {e.would_have_chosen or 'the chosen'}")
    lines.append(f"note: {e.note}")
    if d.advice is not None:
        a = d.advice
        lines.append(f"ADVISORY: this ran the baseline; the tuner would have chosen {a.candidate_key} ({a.source}), "
                     f"predicted saving {_num(a.predicted_saving)} {a.ranked_on}".rstrip())
        if a.ran_predicted is not None:
            q = a.ran_predicted
            lines.append(f"  the tuner's prediction for what ran: p99 {q.latency_p99_ms:.4g} ms, "
                         f"{q.energy_j_per_item:.4g} J/item, {q.throughput_items_per_s:.4g} items/s")
    if e.runner_ups:
        lines.append("runner-ups (objective | p99 ms | J/item | items/s | why it lost):")
        for a in e.runner_ups:
            q = a.prediction
            lines.append(f"  {a.candidate_key} | {_num(a.objective)} | {q.latency_p99_ms:.4g} | "
                         f"{q.energy_j_per_item:.4g} | {q.throughput_items_per_s:.4g} | {a.reason}")
    return "\n".join(lines) + "\n"


def decision_artifacts(d: Decision) -> dict[str, str]:
    """``{artifact path: text}`` of one decision (JSON and readable text)."""
    stem = f"{DECISIONS_DIR}/{d.decision_id}"
    return {f"{stem}.json": d.model_dump_json(indent=2), f"{stem}.txt": explanation_text(d)}


def decision_tags(d: Decision) -> dict[str, str]:
    e = d.explanation
    tags = {TAG_CHOSEN: d.candidate.key, TAG_WOULD_HAVE_CHOSEN: e.would_have_chosen or "the chosen",
            TAG_NOTE: explanation_text(d)[:MAX_NOTE_CHARS]}
    if e.ranked_on:
        tags[TAG_RANKED_ON] = e.ranked_on
    if e.objective is not None:
        tags[TAG_OBJECTIVE] = f"{e.objective:.6g}"
    if d.advice is not None:
        tags |= {TAG_ADVISORY: "true", TAG_WOULD_HAVE_CHOSEN: d.advice.candidate_key}
        if d.advice.ranked_on:
            tags[TAG_ADVISORY_RANKED_ON] = d.advice.ranked_on
    return tags


def advice_metrics(d: Decision | None) -> dict[str, float]:
    """Advisory mode's numbers as metrics, to chart beside the measured ``latency_p99_ms`` and
    ``energy_j_per_item``: the predicted saving, and the tuner's predictions for what ran and for its own choice."""
    a = None if d is None else d.advice
    if a is None:
        return {}
    out = {"advisory_would_have_p99_ms": a.predicted.latency_p99_ms,
           "advisory_would_have_energy_j_per_item": a.predicted.energy_j_per_item}
    if a.ran_predicted is not None:
        out |= {"advisory_ran_predicted_p99_ms": a.ran_predicted.latency_p99_ms,
                "advisory_ran_predicted_energy_j_per_item": a.ran_predicted.energy_j_per_item}
    if a.predicted_saving is not None:
        out["advisory_predicted_saving"] = a.predicted_saving
    return out


def link_served_model(tracker: Any, run_id: str, variant: str) -> bool:
    """Record the served variant's logged model (``oltunes-models``, `oltunes.tracking.models`) as the run's model
    output: MLflow 3's GenAI view lists runs with a model output under *Training runs*, others under *Evaluations*.
    False when the variant was never logged (no model file: simulated runs); the caller's MLflow errors apply."""
    from mlflow.entities import LoggedModelOutput

    c = tracker._client()
    models = c.get_experiment_by_name(cv.experiment_for("models"))
    if models is None:
        return False
    found = c.search_logged_models([models.experiment_id], filter_string=f"name = {literal(variant, 'variant')}",
                                   max_results=1)
    if not found:
        return False
    c.log_outputs(run_id, [LoggedModelOutput(found[0].model_id, 0)])
    return True
