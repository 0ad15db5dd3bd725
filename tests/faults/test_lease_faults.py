"""Issue 31 cases 5, 9 and 10 end to end: a real ``oltunes tuner serve --inventory`` process, real lease holders
(``hold_lease`` over `RemoteLeases`, in their own processes), and a hostile caller with the service token.

- Another caller cannot renew, move or release a held lease, nor take it by asking for the same job (case 5);
  the holder keeps it; the listing shows no ids without the admin token; the admin may free a slot.
- Without the token only /v1/health answers: /metrics, /openapi.json, /docs too need it or are off (case 9).
- The lease book survives a SIGKILL (snapshot + log) with the holder's secret still valid.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import httpx
import pytest
import yaml

from tests.tuner.serve_process import AUTH, TOKEN, ServeProcess

pytestmark = pytest.mark.slow

ADMIN = "fault-admin-token-789"


class LeasingService(ServeProcess):
    def __init__(self, workdir):
        super().__init__(workdir)
        inventory = workdir / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({"pools": [
            {"name": "cpu-f", "accelerator": "cpu", "count": 1, "slots_per_device": 1, "cpu_set": [0]}]}))
        self.cmd += ["--inventory", str(inventory)]
        self.env["OLTUNES_TUNER_ADMIN_TOKEN"] = ADMIN


HOLDER = textwrap.dedent("""
    import asyncio, sys
    from oltunes.client.tuner_client import TunerClient
    from oltunes.allocator.api import RemoteLeases
    from oltunes.allocator.holder import hold_lease
    from oltunes.types import JobSpec

    async def main(url, token):
        client = TunerClient(url, token=token, outbox_dir=None)
        job = JobSpec(job_id="owner-job", family="cnn", slo_ms=5000.0, items=10)
        async with hold_lease(RemoteLeases(client), job, ttl_s=3.0, wait_s=60) as lease:
            print("held", lease.lease_id, lease.secret, flush=True)
            await asyncio.sleep(float(sys.argv[3]))
        print("released", flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
""")


def test_a_hostile_caller_cannot_free_move_or_take_a_real_holders_lease(tmp_path):
    with LeasingService(tmp_path) as svc:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, svc.url, TOKEN, "8"], stdout=subprocess.PIPE,
                                  text=True, env=svc.env)
        try:
            word, lease_id, secret = holder.stdout.readline().split()
            assert word == "held"
            with httpx.Client(base_url=svc.url + "/v1", headers=AUTH, timeout=30) as http:
                listed = http.get("/leases").json()["leases"]
                assert [l["job"]["job_id"] for l in listed] == ["owner-job"]
                assert listed[0]["lease_id"] != lease_id and secret not in str(listed)  # no id, no secret
                admin = {"Authorization": f"Bearer {ADMIN}"}
                assert http.get("/leases", headers=admin).json()["leases"][0]["lease_id"] == lease_id
                # The hostile caller knows the id (say, from a log) but not the secret.
                assert http.post(f"/leases/{lease_id}/renew", json={}).status_code == 409
                decision = http.get("/leases", headers=admin).json()["leases"][0]["decision"]
                assert http.post(f"/leases/{lease_id}/move", json={"decision": decision}).status_code == 409
                assert http.delete(f"/leases/{lease_id}").status_code == 409
                taken = http.post("/leases", json={"job": {"job_id": "owner-job", "family": "cnn", "slo_ms": 5000.0,
                                                           "items": 10}}).json()
                assert taken["status"] == "waiting" and taken["secret"] is None
                other = http.post("/leases", json={"job": {"job_id": "second", "family": "cnn", "slo_ms": 5000.0,
                                                           "items": 10}, "ttl_s": 60}).json()
                assert other["status"] == "waiting"  # the one slot is still the owner's
            assert holder.stdout.readline().strip() == "released"  # its own release, with its secret, worked
            assert holder.wait(timeout=30) == 0
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()


def test_only_health_is_open_without_the_token(tmp_path):
    with LeasingService(tmp_path) as svc, httpx.Client(base_url=svc.url, timeout=30) as http:
        assert http.get("/v1/health").status_code == 200
        for path in ("/metrics", "/openapi.json", "/v1/leases", "/v1/state", "/v1/variants"):
            assert http.get(path).status_code == 401, path
        assert http.get("/docs").status_code == 404 and http.get("/redoc").status_code == 404
        assert http.get("/metrics", headers=AUTH).status_code == 200


def test_the_book_and_its_secrets_survive_a_sigkill(tmp_path):
    svc = LeasingService(tmp_path)
    with svc, httpx.Client(base_url=svc.url + "/v1", headers=AUTH, timeout=30) as http:
        mine = http.post("/leases", json={"job": {"job_id": "keep", "family": "cnn", "slo_ms": 5000.0, "items": 10},
                                          "ttl_s": 600}).json()
        queued = http.post("/leases", json={"job": {"job_id": "next", "family": "cnn", "slo_ms": 5000.0,
                                                    "items": 10}, "ttl_s": 600}).json()
        assert (mine["status"], queued["status"]) == ("granted", "waiting")
        svc.kill()
    svc.start()
    try:
        with httpx.Client(base_url=svc.url + "/v1", headers=AUTH, timeout=30) as http:
            lid = mine["lease"]["lease_id"]
            own = {"X-Lease-Secret": mine["secret"]}
            assert http.post(f"/leases/{lid}/renew", json={}).status_code == 409
            assert http.post(f"/leases/{lid}/renew", json={}, headers=own).json()["lease"]["lease_id"] == lid
            assert http.delete(f"/leases/{lid}", headers=own).json() == {"released": True}
            again = {"job": {"job_id": "next", "family": "cnn", "slo_ms": 5000.0, "items": 10}, "ttl_s": 600,
                     "secret": queued["secret"]}
            assert http.post("/leases", json=again).json()["status"] == "granted"  # its turn kept across the kill
    finally:
        svc.kill()
