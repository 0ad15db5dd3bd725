"""A decision in MLflow: its explanation as artifacts (JSON and readable text), the chosen and would-have-chosen
candidates as tags, the readable text as the run's description, and the served variant's logged model as the
run's model output (see ``mlflow/README.md``).

* ``oltunes/decisions/<decision_id>.json`` — the whole `Decision` (candidate, group, explanation);
* ``oltunes/decisions/<decision_id>.txt`` — the explanation as ``docs/decisions.md`` reads it;
* tags ``oltunes.chosen`` (the chosen candidate's key), ``oltunes.would_have_chosen`` (the best feasible candidate on
  the objective alone, or ``the chosen``), ``oltunes.ranked_on``, ``oltunes.objective`` (the chosen's value);
* ``mlflow.note.content``: the readable text (the run page's *Description*).
"""

from __future__ import annotations

from typing import Any

from oltunes.tracking import conventions as cv
from oltunes.tracking.filters import literal
from oltunes.types import Decision

__all__ = ["DECISIONS_DIR", "TAG_CHOSEN", "TAG_WOULD_HAVE_CHOSEN", "decision_artifacts", "decision_tags",
           "explanation_text", "link_served_model"]

DECISIONS_DIR = "oltunes/decisions"
TAG_CHOSEN = "oltunes.chosen"
TAG_WOULD_HAVE_CHOSEN = "oltunes.would_have_chosen"
TAG_RANKED_ON = "oltunes.ranked_on"
TAG_OBJECTIVE = "oltunes.objective"
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
    return tags


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
