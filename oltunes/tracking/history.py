"""The learner's history as MLflow recorded it, and a warm start that reads only what the tuner has not seen.

The tuner's state is the source of truth for learning; MLflow is the record. A cursor file beside the tuner
state holds, per experiment, the end time of the newest finished run the state has absorbed (a high-water mark).
A warm start reads only runs that ended after it (less an overlap for clock skew between hosts; the tuner drops
measurements it has already seen), so flow start-up does not grow with the history. With no state, or a cursor
that does not belong to it, the history is rebuilt from every run, page by page, with a progress bar.

Runs still RUNNING (a live streaming service) are read once they end: their own flow observes their steps.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from oltunes.atomic import atomic_write_json
from oltunes.tracking import conventions as cv
from oltunes.tracking.client import TrackingUnavailable, mlflow_errors
from oltunes.tracking.service import parse_chunk
from oltunes.types import Measurement

if TYPE_CHECKING:
    from oltunes.tuner.protocol import TunerLike

log = logging.getLogger(__name__)

PAGE = 500
OVERLAP_MS = 10 * 60 * 1000  # re-read runs that ended this long before the mark: hosts' clocks differ


def experiments_for(kinds: Iterable[str], include_simulated: bool) -> list[str]:
    names = [cv.experiment_for(k) for k in kinds]
    if include_simulated and cv.experiment_for("simulation") not in names:
        names.append(cv.experiment_for("simulation"))
    return names


def _run_measurements(client: Any, run: Any) -> list[Measurement]:
    out = cv.measurements_in_tags(run.data.tags)
    if cv.TAG_SERVICE in run.data.tags:
        rid = run.info.run_id
        with tempfile.TemporaryDirectory() as tmp:
            for f in client.list_artifacts(rid, cv.STEPS_DIR):
                if f.path.endswith(".jsonl"):
                    out += parse_chunk(Path(client.download_artifacts(rid, f.path, tmp)).read_text())
    return out


def read_runs(tracker: Any, experiments: Iterable[str], since: dict[str, int] | None, progress: bool = False):
    """Measurements of the runs of `experiments` (all of them, or those ended after ``since[name]``), and the new
    high-water marks: ``(measurements by id, {experiment: newest end time read})``."""
    c = tracker._client()
    found: dict[str, Measurement] = {}
    marks: dict[str, int] = dict(since or {})
    bar = _progress(progress)
    with mlflow_errors(tracker.uri), bar:
        task = bar.add_task("rebuilding history from MLflow", total=None)
        for name in experiments:
            exp = c.get_experiment_by_name(name)
            if exp is None:
                continue
            mark = (since or {}).get(name)
            flt = f"attributes.end_time > {max(0, mark - OVERLAP_MS)}" if mark is not None else ""
            token = None
            while True:
                page = c.search_runs([exp.experiment_id], filter_string=flt, max_results=PAGE, page_token=token)
                for run in page:
                    for m in _run_measurements(c, run):
                        found.setdefault(m.measurement_id, m)
                    if run.info.end_time:
                        marks[name] = max(marks.get(name, 0), int(run.info.end_time))
                bar.update(task, advance=len(page), description=f"{name}: {len(found)} measurements")
                token = page.token
                if not token:
                    break
    return found, marks


def buffered_measurements(tracker: Any) -> list[Measurement]:
    out = []
    for _, rec in tracker.buffer.items():
        out += cv.measurements_in_tags(rec.get("tags", {}))
        out += [cv.parse_measurement(s["record"]) for s in rec.get("steps", [])]
    return out


def history(
    tracker: Any,
    kinds: Iterable[str] = ("batch", "streaming"),
    *,
    include_simulated: bool = False,
    include_buffered: bool = True,
    progress: bool = False,
) -> list[Measurement]:
    """Every Measurement logged in the experiments of `kinds` (plus buffered ones), oldest first.

    These are exactly the learner's observations, so ``tuner.observe_many(history(tracker))`` rebuilds a tuner.
    """
    try:
        found, _ = read_runs(tracker, experiments_for(kinds, include_simulated), None, progress)
    except TrackingUnavailable as e:
        tracker._forget_client()
        raise TrackingUnavailable(f"{e}; history cannot be read now") from e
    if include_buffered:
        for m in buffered_measurements(tracker):
            found.setdefault(m.measurement_id, m)
    out = [m for m in found.values() if include_simulated or not m.simulated]
    return sorted(out, key=lambda m: m.timestamp)


class Cursor(BaseModel):
    """What a tuner state has absorbed from one MLflow store (written after the state, atomically)."""

    uri: str
    marks: dict[str, int] = {}
    n_observed: int | None = None


def cursor_path(state_path: Path) -> Path:
    return Path(state_path).with_name(Path(state_path).stem + ".mlflow-cursor.json")


def _load_cursor(path: Path, uri: str, n_observed: int | None, state_path: Path) -> Cursor | None:
    """The cursor if it describes this tuner's state and this store; else None (rebuild from scratch)."""
    try:
        cur = Cursor.model_validate_json(path.read_text())
    except (OSError, ValidationError, ValueError):
        return None
    if cur.uri != uri:
        return None
    if n_observed is not None and not Path(state_path).exists():
        return None  # the state it belonged to is gone
    n = n_observed
    if n is not None and cur.n_observed is not None and n < cur.n_observed:
        return None  # an older state (restored backup): it has not seen what the cursor says
    return cur


def warm_start(tracker: Any, tuner: TunerLike, state_path: Path, kinds: Iterable[str], *, simulated: bool) -> int:
    """Observe into `tuner` the logged measurements its state has not absorbed; returns how many were new.

    Reads runs ended after the cursor beside `state_path` (or all of them, with a progress bar, when there is no
    valid cursor); saves the tuner and only then advances the cursor. The cursor is checked against what the
    tuner says it has learnt (``n_observed``; None: a tuning service, which keeps its own state elsewhere).
    """
    path = cursor_path(state_path)
    cur = _load_cursor(path, tracker.uri, tuner.n_observed, state_path)
    names = experiments_for(kinds, simulated)
    found, marks = read_runs(tracker, names, cur.marks if cur else None, progress=cur is None)
    for m in buffered_measurements(tracker):
        found.setdefault(m.measurement_id, m)
    todo = sorted((m for m in found.values() if m.simulated == simulated), key=lambda m: m.timestamp)
    new = sum(tuner.observe_many(todo)) if todo else 0
    if new or not Path(state_path).exists():
        tuner.save()
    atomic_write_json(path, Cursor(uri=tracker.uri, marks=marks, n_observed=tuner.n_observed).model_dump())
    log.info("warm start: %d run measurement(s) read, %d new to the tuner (%s)", len(todo), new,
             "incremental" if cur else "full rebuild")  # fmt: skip
    return new


def _progress(enabled: bool) -> Any:
    from rich.progress import Progress, SpinnerColumn, TextColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}: {task.completed} runs"), disable=not enabled,
                    transient=True)  # fmt: skip

