"""The decision explanation as a markdown table (published as a Prefect artifact and printed by the demo)."""

from __future__ import annotations

from oltunes.types import Decision, Measurement


def _f(x: float | None, digits: int = 4) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


def decision_markdown(decision: Decision, measured: Measurement | None, *, title: str = "Decision", slo_ms: float | None = None) -> str:
    """Decision, predicted vs measured, and the runner-up candidates with why they lost."""
    c = decision.candidate
    p = decision.explanation.predicted
    lines = [
        f"### {title}: `{c.key}`",
        "",
        "| field | value |",
        "| --- | --- |",
        f"| job | `{decision.job_id}` |",
        f"| pool / accelerator | {c.pool} / {c.accelerator} |",
        f"| variant | {c.variant.name} ({c.variant.precision}, accuracy {c.variant.accuracy:.3f}) |",
        f"| batch size / concurrency | {c.batch_size} / {c.concurrency} |",
        f"| co-runners | {', '.join(r.job_id for r in c.co_runners) or 'none'} |",
        f"| source | {decision.source}{'' if decision.feasible else ' (no feasible candidate)'} |",
        f"| candidates (feasible) | {decision.explanation.n_candidates} ({decision.explanation.n_feasible}) |",
    ]
    e = decision.explanation
    if e.ranked_on:
        lines.append(f"| ranked on | {e.ranked_on}: {_f(e.objective)} (near-equal band {e.near_equal_band:.1%}) |")
        best = f"`{e.would_have_chosen}`" if e.would_have_chosen else "the chosen"
        lines.append(f"| best on the objective alone | {best} |")
    if e.note:
        lines.append(f"| note | {e.note} |")
    lines += [
        "",
        "| metric | predicted | measured |",
        "| --- | --- | --- |",
        f"| latency p99 (ms) | {_f(p.latency_p99_ms)} (+{_f(p.margin_ms, 3)} margin) | {_f(measured.latency_p99_ms) if measured else '–'} |",
        f"| energy (J/item) | {_f(p.energy_j_per_item)} | {_f(measured.energy_j_per_item) if measured else '–'}"
        f"{f' ({measured.energy_source})' if measured else ''} |",
        f"| throughput (items/s) | {_f(p.throughput_items_per_s)} | {_f(measured.throughput_items_per_s) if measured else '–'} |",
    ]
    if measured is not None and measured.accuracy is not None:
        lines.append(f"| accuracy | {c.variant.accuracy:.4f} (zoo) | {measured.accuracy:.4f} |")
    if slo_ms is not None and measured is not None:
        lines.append(f"| SLO {slo_ms:g} ms met | – | {'yes' if measured.latency_p99_ms <= slo_ms else 'no'} |")
    if e.runner_ups:
        ranked = e.ranked_on or "objective"
        lines += ["", f"| runner-up | {ranked} | p99 (ms) | energy (J/item) | throughput | why not |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for alt in e.runner_ups:
            q = alt.prediction
            lines.append(
                f"| `{alt.candidate_key}` | {_f(alt.objective)} | {_f(q.latency_p99_ms)} | {_f(q.energy_j_per_item)} | "
                f"{_f(q.throughput_items_per_s)} | {alt.reason} |"
            )
    return "\n".join(lines) + "\n"
