"""Zoo variants in MLflow: each one a logged ONNX model with its accuracy as a metric, registered per family.

One registered model per family, ``oltunes.<family>``; one version per variant file (tags ``variant`` and
``sha256``: registering the same file again reuses its version). Each version comes from a run in the
``oltunes-models`` experiment that logged the ONNX model (MLflow 3 logged model) with metrics ``accuracy`` (the
zoo's held-out accuracy) and, once a labelled job measured it, ``measured_accuracy``. The alias ``preferred``
points at the version of the variant the tuner prefers now (load it with ``models:/oltunes.<family>@preferred``).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from oltunes.atomic import sha256_file
from oltunes.tracking import conventions as cv
from oltunes.tracking.client import RecordRejected, TrackingUnavailable, mlflow_errors
from oltunes.tracking.filters import literal
from oltunes.tracking.store import now_ms
from oltunes.types import Variant

log = logging.getLogger(__name__)

PREFERRED = "preferred"


def registered_name(family: str) -> str:
    return f"oltunes.{family}"


def _versions(client: Any, name: str) -> dict[tuple[str, str], Any]:
    """Existing versions of `name` by (variant, file digest)."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name, description=f"OLTunes zoo family {name.split('.', 1)[1]}")
    except MlflowException as e:
        if "RESOURCE_ALREADY_EXISTS" not in str(e.error_code):
            raise
    found = client.search_model_versions(f"name = {literal(name, 'family')}")
    return {(v.tags.get("variant", ""), v.tags.get("sha256", "")): v for v in found}


def _log_variant(tracker: Any, v: Variant, digest: str) -> Any:
    """A run in ``oltunes-models`` that logs `v` as an ONNX model; returns (run id, logged model)."""
    import mlflow.onnx
    import onnx
    from mlflow.entities import Metric, Param

    c = tracker._client()
    eid = tracker._experiment_id(cv.experiment_for("models"))
    params = {"family": v.family, "variant": v.name, "size": v.size, "precision": v.precision,
              "params": str(v.params), "bytes": str(v.bytes)}  # fmt: skip
    run = c.create_run(eid, run_name=f"zoo-{v.name}", tags={"variant": v.name, "sha256": digest})
    rid = run.info.run_id
    model = c.create_logged_model(eid, name=v.name, source_run_id=rid, params=params, model_type="onnx",
                                  tags={"sha256": digest})  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.onnx.save_model(onnx.load(v.path, load_external_data=True), str(Path(tmp) / "model"),
                               save_as_external_data=False)  # fmt: skip
        c.log_model_artifacts(model.model_id, str(Path(tmp) / "model"))
    c.finalize_logged_model(model.model_id, "READY")
    ts = now_ms()
    c.log_batch(rid, metrics=[Metric("accuracy", v.accuracy, ts, 0, model_id=model.model_id)],
                params=[Param(k, val) for k, val in params.items()])  # fmt: skip
    c.set_terminated(rid)
    return rid, model


def register_variants(
    tracker: Any,
    variants: Iterable[Variant],
    *,
    preferred: Variant | None = None,
    measured_accuracy: float | None = None,
) -> dict[str, str]:
    """Log and register every variant with a model file (once per file); point ``preferred`` of its family at
    `preferred` and record its `measured_accuracy`. Returns ``{variant name: version}``; empty when MLflow is
    unreachable (registration is retried on the next call)."""
    from mlflow.entities import Metric
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    out: dict[str, str] = {}
    by_family: dict[str, list[Variant]] = {}
    for v in variants:
        if v.path and Path(v.path).is_file():
            by_family.setdefault(v.family, []).append(v)
    try:
        c = tracker._client()
        with mlflow_errors(tracker.uri):
            for family, vs in by_family.items():
                name = registered_name(family)
                existing = _versions(c, name)
                for v in vs:
                    digest = sha256_file(Path(v.path))[:16]
                    mv = existing.get((v.name, digest))
                    if mv is None:
                        rid, model = _log_variant(tracker, v, digest)
                        tags = {"variant": v.name, "sha256": digest, "published_accuracy": f"{v.accuracy:.6g}",
                                "precision": v.precision, "size": v.size}  # fmt: skip
                        # The SQL registry resolves a models:/ source with the *global* tracking URI (MLflow 3).
                        with _use_tracking_uri(tracker.uri):
                            mv = c.create_model_version(name, source=model.model_uri, run_id=rid, tags=tags,
                                                        model_id=model.model_id)  # fmt: skip
                    out[v.name] = str(mv.version)
                    if preferred is not None and preferred.name == v.name:
                        c.set_registered_model_alias(name, PREFERRED, str(mv.version))
                        if measured_accuracy is not None:
                            c.set_model_version_tag(name, str(mv.version), "measured_accuracy", f"{measured_accuracy:.6g}")
                            if mv.run_id:
                                c.log_batch(mv.run_id, metrics=[Metric("measured_accuracy", measured_accuracy,
                                                                       now_ms(), 0, model_id=getattr(mv, "model_id", None))])  # fmt: skip
    except (TrackingUnavailable, RecordRejected) as e:
        log.warning("could not register zoo variants in the MLflow model registry (%s)", e)
        tracker._forget_client()
        return {}
    return out
