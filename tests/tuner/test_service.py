"""The tuning service over real HTTP: a real uvicorn on a loopback port, serving a real Tuner."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from typer.testing import CliRunner

from oltunes.errors import ConfigError
from oltunes.inventory import CATALOG
from oltunes.tuner import Tuner
from oltunes.netaddr import check_bind, is_loopback
from oltunes.service.app import create_app, serve_in_thread
from oltunes.types import (
    Candidate,
    ClusterState,
    Decision,
    JobSpec,
    Measurement,
    Pool,
    Variant,
)
from tests.tuner.serve_process import AUTH, TOKEN
from tests.tuner.variants import make_variants



def make_cluster() -> ClusterState:
    return ClusterState(pools=[Pool(name=n, accelerator=CATALOG[a], count=2) for n, a in
                               (("cpu-a", "cpu"), ("t4-a", "t4"), ("a100-a", "a100"))])


def make_measurement(candidate: Candidate, i: int, latency_ms: float = 5.0) -> Measurement:
    return Measurement(
        measurement_id=f"m-{i}", job_id=f"j-{i}", candidate=candidate, items=100, wall_s=1.0,
        latency_p50_ms=latency_ms * 0.8, latency_p95_ms=latency_ms * 0.95, latency_p99_ms=latency_ms,
        throughput_items_per_s=100.0, energy_j_per_item=0.5, energy_source="simulated", simulated=True,
    )


JOB = JobSpec(job_id="job-1", family="cnn", slo_ms=200.0, accuracy_floor=0.9)


@pytest.fixture
def served(tmp_path):
    """A real uvicorn on a free loopback port serving a fresh Tuner with a token; yields (url, tuner)."""
    tuner = Tuner(make_variants(), seed=0)
    app = create_app(tuner, token=TOKEN, state_path=tmp_path / "state.json", persist_every_s=0)
    with serve_in_thread(app) as url:
        yield url, tuner


def test_recommend_observe_health_state_over_http(served):
    url, tuner = served
    cluster = make_cluster()
    twin = Tuner(make_variants(), seed=0)  # same inputs in-process: the service must add nothing
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as http:
        r = http.post("/v1/recommend",
                      json={"job": JOB.model_dump(mode="json"), "cluster": cluster.model_dump(mode="json")})
        assert r.status_code == 200, r.text
        decision = Decision.model_validate(r.json()["decision"])
        expected = twin.decide(JOB, cluster)
        assert decision.job_id == JOB.job_id
        assert (decision.candidate.key, decision.source, decision.feasible) == (
            expected.candidate.key, expected.source, expected.feasible)

        m0, m1 = make_measurement(decision.candidate, 0), make_measurement(decision.candidate, 1)
        r = http.post("/v1/observe", content=m0.model_dump_json(), headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        assert (r.json()["accepted"], r.json()["duplicates"]) == (1, 0)
        # a list with the same measurement again plus a new one: exactly-once by measurement_id
        body = {"measurements": [json.loads(m0.model_dump_json()), json.loads(m1.model_dump_json())]}
        r = http.post("/v1/observe", json=body)
        assert (r.json()["accepted"], r.json()["duplicates"], r.json()["accepted_ids"]) == (1, 1, ["m-1"])

        health = http.get("/v1/health").json()
        assert health["status"] == "ok" and health["n_observed"] == 2 and health["auth"] is True
        assert health["n_variants"] == len(make_variants())

        state = http.get("/v1/state").json()
        assert state == json.loads(json.dumps(tuner.state_dict()))
        restored = Tuner.from_state_dict(state)
        assert restored.observe(m0) is False  # the snapshot remembers what was observed

        names = {v["name"] for v in http.get("/v1/variants").json()["variants"]}
        assert names == {v.name for v in make_variants()}
        rnn = Variant(family="rnn", name="rnn-s", size="s", accuracy=0.8, params=1_000_000)
        r = http.post("/v1/variants", json={"variants": [rnn.model_dump(mode="json")]})
        assert r.status_code == 200 and "rnn-s" in {v["name"] for v in r.json()["variants"]}
        r = http.post("/v1/recommend", json={"job": {**JOB.model_dump(mode="json"), "family": "rnn"},
                                             "cluster": cluster.model_dump(mode="json")})
        assert r.status_code == 200 and r.json()["decision"]["candidate"]["variant"]["name"] == "rnn-s"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                                     {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": "Basic abc"}])
def test_auth_refused_without_the_right_token(served, headers):
    url, _ = served
    job = {"job": JOB.model_dump(mode="json"), "cluster": make_cluster().model_dump(mode="json")}
    with httpx.Client(base_url=url, timeout=10) as http:
        assert http.post("/v1/recommend", json=job, headers=headers).status_code == 401
        assert http.post("/v1/observe", json=[], headers=headers).status_code == 401
        r = http.get("/v1/state", headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert http.get("/v1/health", headers=headers).status_code == 200  # health stays open for probes
        assert http.post("/v1/recommend", json=job, headers=AUTH).status_code == 200


def test_no_token_means_open_on_loopback(tmp_path):
    app = create_app(Tuner(make_variants()), token=None)
    job = {"job": JOB.model_dump(mode="json"), "cluster": make_cluster().model_dump(mode="json")}
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        assert http.post("/v1/recommend", json=job).status_code == 200
        assert http.get("/v1/health").json()["auth"] is False


def test_refuses_non_loopback_bind_without_token(oltunes_home, monkeypatch):
    for host in ("127.0.0.1", "localhost", "::1"):
        assert is_loopback(host)
        check_bind(host, None, service="tuner", token_setting="OLTUNES_TUNER_TOKEN")
    for host in ("0.0.0.0", "::", "192.0.2.10"):
        assert not is_loopback(host)
        with pytest.raises(ConfigError, match="OLTUNES_TUNER_TOKEN"):
            check_bind(host, None, service="tuner", token_setting="OLTUNES_TUNER_TOKEN")
        check_bind(host, TOKEN, service="tuner", token_setting="OLTUNES_TUNER_TOKEN")  # a token: anywhere

    from oltunes.cli import app

    monkeypatch.delenv("OLTUNES_TUNER_TOKEN", raising=False)
    result = CliRunner().invoke(app, ["tuner", "serve", "--host", "0.0.0.0", "--port", "1"])
    assert result.exit_code != 0
    assert "non-loopback" in result.output and "OLTUNES_TUNER_TOKEN" in result.output


def _post(http: httpx.Client, path: str, body) -> httpx.Response:
    if isinstance(body, bytes):
        return http.post(path, content=body, headers={**AUTH, "Content-Type": "application/json"})
    return http.post(path, json=body, headers=AUTH)


def test_malformed_requests_get_4xx_with_reason_and_server_keeps_serving(served):
    url, _ = served
    cluster = make_cluster().model_dump(mode="json")
    job = JOB.model_dump(mode="json")
    good_m = json.loads(make_measurement(make_cluster_candidate(), 0).model_dump_json())
    cases = [
        ("/v1/recommend", b"{not json", "json"),
        ("/v1/recommend", {"cluster": cluster}, "job"),
        ("/v1/recommend", {"job": {**job, "slo_ms": -5}, "cluster": cluster}, "slo_ms"),
        ("/v1/recommend", {"job": {**job, "accuracy_floor": 1.5}, "cluster": cluster}, "accuracy_floor"),
        ("/v1/recommend", {"job": job, "cluster": cluster, "surprise": 1}, "surprise"),
        ("/v1/recommend", {"job": job}, "cluster"),  # no default cluster: the service has no inventory
        ("/v1/recommend", {"job": job, "cluster": {"pools": [{"name": "x"}]}}, "accelerator"),
        ("/v1/recommend", [1, 2, 3], "body"),
        ("/v1/observe", [], "measurements"),
        ("/v1/observe", {**good_m, "latency_p99_ms": -1}, "latency_p99_ms"),
        ("/v1/observe", {**good_m, "energy_source": "guessed"}, "energy_source"),
        ("/v1/observe", b"\xff\xfe", "json"),
    ]
    with httpx.Client(base_url=url, timeout=10) as http:
        for path, body, field in cases:
            r = _post(http, path, body)
            assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text)
            assert field in r.text, (path, body, r.text)
        assert http.get("/v1/recommend", headers=AUTH).status_code == 405
        assert http.get("/v1/health").status_code == 200
        assert _post(http, "/v1/recommend", {"job": job, "cluster": cluster}).status_code == 200


def make_cluster_candidate() -> Candidate:
    v = make_variants()[0]
    return Candidate(pool="t4-a", accelerator="t4", variant=v, batch_size=4, concurrency=1)


def test_unknown_family_or_pool_is_an_answer_not_a_500(served):
    url, _ = served
    cluster = make_cluster()
    with httpx.Client(base_url=url, headers=AUTH, timeout=10) as http:
        unknown = JOB.model_copy(update={"family": "no-such-family"}).model_dump(mode="json")
        r = http.post("/v1/recommend", json={"job": unknown, "cluster": cluster.model_dump(mode="json")})
        assert r.status_code < 500, r.text
        if r.status_code == 200:
            assert r.json()["decision"]["feasible"] is False
        else:
            assert "no-such-family" in r.text
        # a measurement from a pool and variant the tuner never saw is still a measurement
        other = Variant(family="rnn", name="rnn-x", size="x", accuracy=0.5)
        cand = Candidate(pool="elsewhere", accelerator="h100", variant=other, batch_size=2)
        r = http.post("/v1/observe", content=make_measurement(cand, 99).model_dump_json(),
                      headers={"Content-Type": "application/json"})
        assert r.status_code < 500, r.text
        assert http.post("/v1/recommend", json={"job": JOB.model_dump(mode="json"),
                                                "cluster": cluster.model_dump(mode="json")}).status_code == 200


def test_default_cluster_from_inventory(tmp_path):
    pools = make_cluster().pools
    app = create_app(Tuner(make_variants()), pools=pools)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        r = http.post("/v1/recommend", json={"job": JOB.model_dump(mode="json")})
        assert r.status_code == 200, r.text
        assert r.json()["decision"]["candidate"]["pool"] in {p.name for p in pools}


def test_state_persisted_on_shutdown_and_restored(tmp_path):
    path = tmp_path / "tuner" / "state.json"
    cluster = make_cluster()
    tuner = Tuner(make_variants(), seed=0)
    measurements = [make_measurement(make_cluster_candidate().model_copy(update={"batch_size": b}), i, 2.0 * b)
                    for i, b in enumerate((1, 2, 4, 8, 16))]
    with serve_in_thread(create_app(tuner, token=TOKEN, state_path=path, persist_every_s=0)) as url:
        with httpx.Client(base_url=url, headers=AUTH, timeout=10) as http:
            body = "[" + ",".join(m.model_dump_json() for m in measurements) + "]"
            r = http.post("/v1/observe", content=body, headers={"Content-Type": "application/json"})
            assert r.json()["accepted"] == 5
            snapshot = http.get("/v1/state").json()
        assert not path.exists()  # persist_every_s=0: written on shutdown only
    assert path.exists()
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # no temp files left behind
    journal = path.with_name("state.json.journal")  # compacted into the state: only an empty open segment
    assert list(journal.iterdir()) == []  # compacted: no segment, not even an empty one

    restored = Tuner.load(path)
    assert json.loads(json.dumps(restored.state_dict())) == snapshot
    # a restarted service keeps exactly-once and decides like the one that stopped
    with serve_in_thread(create_app(restored, token=TOKEN, state_path=path)) as url:
        with httpx.Client(base_url=url, headers=AUTH, timeout=10) as http:
            body = "[" + ",".join(m.model_dump_json() for m in measurements) + "]"
            r = http.post("/v1/observe", content=body, headers={"Content-Type": "application/json"})
            assert (r.json()["accepted"], r.json()["duplicates"]) == (0, 5)
            r = http.post("/v1/recommend", json={"job": JOB.model_dump(mode="json"),
                                                 "cluster": cluster.model_dump(mode="json")})
            assert r.json()["decision"]["candidate"] == json.loads(
                tuner.decide(JOB, cluster).candidate.model_dump_json())


def test_state_persisted_periodically(tmp_path):
    path = tmp_path / "state.json"
    tuner = Tuner(make_variants(), seed=0)
    with serve_in_thread(create_app(tuner, state_path=path, persist_every_s=0.1)) as url:
        with httpx.Client(base_url=url, timeout=10) as http:
            m = make_measurement(make_cluster_candidate(), 7)
            http.post("/v1/observe", content=m.model_dump_json(), headers={"Content-Type": "application/json"})
            deadline = time.monotonic() + 10
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert path.exists(), "the background persister never wrote the state"
            assert Tuner.load(path).observe(m) is False


def test_cli_recommend_prints_a_decision(oltunes_home, tmp_path, repo_root):
    from oltunes.cli import app

    (tmp_path / "job.json").write_text(JOB.model_dump_json())
    (tmp_path / "variants.json").write_text(json.dumps([v.model_dump(mode="json") for v in make_variants()]))
    result = CliRunner().invoke(app, ["tuner", "recommend", "--job", str(tmp_path / "job.json"),
                                      "--inventory", str(repo_root / "infra" / "inventory.local.yaml"),
                                      "--variants", str(tmp_path / "variants.json")])
    assert result.exit_code == 0, result.output
    decision = Decision.model_validate_json(result.stdout)
    assert decision.job_id == JOB.job_id and decision.candidate.pool.startswith("cpu")
    (tmp_path / "bad.json").write_text('{"family": "cnn", "slo_ms": 0}')
    result = CliRunner().invoke(app, ["tuner", "recommend", "--job", str(tmp_path / "bad.json"),
                                      "--variants", str(tmp_path / "variants.json"),
                                      "--inventory", str(repo_root / "infra" / "inventory.local.yaml")])
    assert result.exit_code == 2 and "slo_ms" in result.output


@pytest.mark.slow
def test_cli_serve_subprocess_persists_on_sigint_and_restores(tmp_path):
    """`oltunes tuner serve` as a real process: auth on, state saved on Ctrl-C, restored on restart."""
    from oltunes.client.tuner_client import TunerClient
    from tests.tuner.serve_process import ServeProcess

    svc = ServeProcess(tmp_path, persist_every_s=30)
    with svc:
        with TunerClient(svc.url, token=TOKEN, outbox_dir=tmp_path / "ob") as c:
            decision = c.decide(JOB, make_cluster())
            assert decision.source != "fallback"
            assert [c.observe(make_measurement(decision.candidate, i)) for i in range(3)] == [True] * 3
        assert httpx.get(f"{svc.url}/v1/state", timeout=5).status_code == 401
        svc.stop()
    assert Tuner.load(svc.state).n_observed == 3

    with svc:
        health = httpx.get(f"{svc.url}/v1/health", timeout=5).json()
        assert health["n_observed_total"] == 3 and health["n_observed"] == 0
        svc.stop()


def test_remote_decide_carries_current_and_stays_put_like_in_process(served, tmp_path):
    """``current`` travels in the HTTP body: the service keeps a running job where it is, as the in-process
    tuner does (without it, the job would be sent to the pool's first empty device with no group)."""
    from oltunes.client.tuner_client import TunerClient
    from oltunes.types import Placement

    url, _ = served
    cluster = make_cluster()
    twin = Tuner(make_variants(), seed=0, explore_rate=0.0)
    job = JOB.model_copy(update={"accuracy_floor": 0.0})
    best = twin.decide(job, cluster)
    current = Placement(job_id=job.job_id, pool=best.candidate.pool, device=1, candidate=best.candidate,
                        slo_ms=job.slo_ms)
    expected = twin.decide(job, cluster, current=current)
    assert "kept the current placement" in expected.explanation.note and expected.group.device == 1
    client = TunerClient(url, token=TOKEN, timeout_s=10, outbox_dir=tmp_path / "outbox")
    remote = client.decide(job, cluster, current=current)
    assert remote.source != "fallback"
    assert remote.candidate.key == expected.candidate.key
    assert (remote.group.pool, remote.group.device) == (current.pool, 1)
    assert "kept the current placement" in remote.explanation.note


def test_prometheus_metrics_count_decisions_and_observations_with_the_token(served, tmp_path):
    from oltunes.client.tuner_client import TunerClient

    url, _ = served
    assert httpx.get(f"{url}/metrics", timeout=5).status_code == 401  # issue 31 case 9: the token, as elsewhere
    before = httpx.get(f"{url}/metrics", headers=AUTH, timeout=5)
    assert before.status_code == 200 and before.headers["content-type"].startswith("text/plain")
    with TunerClient(url, token=TOKEN, timeout_s=10, outbox_dir=tmp_path / "outbox") as c:
        d = c.decide(JOB, make_cluster())
        assert [c.observe(make_measurement(d.candidate, i)) for i in (1, 2)] == [True, True]
        assert c.observe(make_measurement(d.candidate, 1)) is False  # a duplicate
    text = httpx.get(f"{url}/metrics", headers=AUTH, timeout=5).text
    feasible = str(d.feasible).lower()
    assert f'oltunes_tuner_decisions_total{{feasible="{feasible}",source="{d.source}"}} 1.0' in text
    assert 'oltunes_tuner_observations_total{outcome="accepted"} 2.0' in text
    assert 'oltunes_tuner_observations_total{outcome="duplicate"} 1.0' in text
    assert "oltunes_tuner_observed 2.0" in text
    assert "oltunes_tuner_recommend_latency_seconds_count 1.0" in text


def test_with_a_token_every_route_but_health_needs_it(tmp_path):
    """Issue 31 case 9: the schema, the docs pages and the metrics too (every route the app has, enumerated)."""
    app = create_app(Tuner(make_variants(), seed=0), token=TOKEN, pools=make_cluster().pools)
    paths = {(m, r.path) for r in app.routes for m in getattr(r, "methods", ()) if m != "HEAD"}
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        for method, path in sorted(paths):
            concrete = path.replace("{lease_id}", "x1").replace("{job_id}", "x1")
            r = http.request(method, concrete)
            if path == "/v1/health":
                assert r.status_code == 200
            else:
                assert r.status_code == 401, (method, path, r.status_code)
        for page in ("/docs", "/redoc"):  # off: a browser cannot send the bearer header
            assert http.get(page).status_code == 404
        assert http.get("/openapi.json", headers=AUTH).json()["info"]["title"] == "OLTunes tuning service"
        assert http.get("/metrics", headers=AUTH).status_code == 200
