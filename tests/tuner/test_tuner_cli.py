"""`oltunes tuner job-template` and `oltunes tuner recommend` as a newcomer uses them (issue 32)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from oltunes.cli import app
from oltunes.types import Decision, JobSpec
from tests.tuner.serve_process import TOKEN, ServeProcess
from tests.tuner.variants import make_variants

runner = CliRunner()


def _variants_file(tmp_path):
    path = tmp_path / "variants.json"
    path.write_text(json.dumps([v.model_dump(mode="json") for v in make_variants()]))
    return path


def test_job_template_documents_every_field_and_is_a_valid_job():
    r = runner.invoke(app, ["tuner", "job-template"])
    assert r.exit_code == 0, r.output
    commented = dict(re.findall(r"^# (\w+): (.+)$", r.output, flags=re.M))
    assert set(JobSpec.model_fields) <= set(commented)  # every field, each with words
    assert "one of: energy, completion_time, cost" in commented["objective"]
    assert "required" in commented["family"] and "> 0" in commented["slo_ms"]
    job = JobSpec.model_validate(yaml.safe_load(r.output))  # pasteable as it is
    assert job.kind == "batch" and job.items == 5000


def test_recommend_reads_the_template_and_explains_the_decision(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(runner.invoke(app, ["tuner", "job-template"]).output)
    r = runner.invoke(app, ["tuner", "recommend", "--job", str(job), "--inventory", "infra/inventory.local.yaml",
                            "--variants", str(_variants_file(tmp_path))])
    assert r.exit_code == 0, r.output
    d = Decision.model_validate_json(r.output)
    assert d.candidate.pool in ("cpu-1core", "cpu-2core") and d.explanation.ranked_on == "energy per item (J/item)"


def test_recommend_without_a_cluster_or_a_service_says_what_to_pass(tmp_path):
    job = tmp_path / "job.json"
    job.write_text(JobSpec(family="cnn", slo_ms=100).model_dump_json())
    r = runner.invoke(app, ["tuner", "recommend", "--job", str(job)])
    assert r.exit_code == 2 and "--cluster or --inventory" in r.output and "OLTUNES_TUNER_URL" in r.output


@pytest.mark.slow
def test_recommend_against_a_running_service_uses_its_inventory(tmp_path):
    """No --inventory: the service started with one decides on its pools."""
    svc = ServeProcess(tmp_path)
    svc.cmd += ["--inventory", "infra/inventory.local.yaml"]
    job = tmp_path / "job.json"
    job.write_text(JobSpec(family="cnn", slo_ms=500, items=1000).model_dump_json())
    with svc:
        env = {**os.environ, "OLTUNES_HOME": str(tmp_path / "client-home"), "OLTUNES_TUNER_URL": svc.url,
               "OLTUNES_TUNER_TOKEN": TOKEN}
        out = subprocess.run([sys.executable, "-c", "from oltunes.cli import app; app()", "tuner", "recommend",
                              "--job", str(job)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    d = Decision.model_validate_json(out.stdout)
    assert d.source != "fallback" and d.candidate.pool in ("cpu-1core", "cpu-2core")


def test_a_request_for_the_service_inventory_has_no_fallback_when_the_service_is_down(tmp_path):
    """The client's safe default needs a cluster: asked for the service's own, it says so instead of guessing."""
    from oltunes.errors import TunerUnavailable
    from oltunes.client.tuner_client import TunerClient
    from tests.tuner.serve_process import free_port

    with TunerClient(f"http://127.0.0.1:{free_port()}", timeout_s=2, outbox_dir=tmp_path / "outbox",
                     retry_after_s=0) as client, pytest.raises(TunerUnavailable, match="--cluster/--inventory"):
        client.decide(JobSpec(family="cnn", slo_ms=100), None)
