"""The gateway's shadow mirror over real HTTP on loopback: its share, its budget, a full queue, a failing shadow.

The workers here are small HTTP/1.1 servers that answer who they are (``primary`` / ``shadow``), so a shadow answer
reaching a client would be seen; the real worker path is in ``test_shadow_e2e.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest

from oltunes.gateway import Gateway, GatewayServer
from oltunes.gateway.shadow import ShadowBudget, ShadowMirror
from oltunes.netaddr import free_port

INFER = "/v2/models/cnn/infer"
BODY = b'{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1.0]}]}'


class StubWorker:
    """An HTTP/1.1 keep-alive server answering every request with `answer(body)` -> (status, body), or by `behave`
    ("close": drop the connection unanswered, "hang": never answer)."""

    def __init__(self, who: bytes, behave: str = "answer", status: int = 200) -> None:
        self.who, self.behave, self.status = who, behave, status
        self.bodies: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> StubWorker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                body = await reader.readexactly(length)
                self.bodies.append(body)
                if self.behave == "close":
                    writer.close()
                    return
                if self.behave == "hang":
                    await asyncio.sleep(3600)
                out = b'{"who":"' + self.who + b'"}'
                writer.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (self.status, len(out), out))  # fmt: skip
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()


async def with_gateway(primary: StubWorker, shadow_url: str | None, budget: ShadowBudget | None,
                       fn: Callable[[httpx.AsyncClient, Gateway], Awaitable[None]]) -> None:  # fmt: skip
    gw = Gateway()
    gw.add("cnn").switch(primary.url, "start")
    async with GatewayServer(gw) as srv, httpx.AsyncClient(base_url=srv.url, timeout=10) as client:
        if shadow_url is not None:
            await gw.shadow("cnn", shadow_url, budget)
        await fn(client, gw)


async def send(client: httpx.AsyncClient, n: int) -> list[httpx.Response]:
    return [await client.post(INFER, content=BODY, headers={"content-type": "application/json"}) for _ in range(n)]


def test_exactly_the_share_is_mirrored_with_the_same_bytes_and_clients_get_only_primary_answers():
    async def main():
        async with StubWorker(b"primary") as primary, StubWorker(b"shadow") as shadow:
            async def fn(client, gw):
                answers = await send(client, 500)
                await asyncio.sleep(0.3)  # the senders finish
                assert {(r.status_code, r.content) for r in answers} == {(200, b'{"who":"primary"}')}
                mirror = gw.shadows["cnn"]
                assert mirror.counts["seen"] == 500 and mirror.counts["ok"] == 10 and mirror.counts["failed"] == 0
                assert shadow.bodies == [BODY] * 10  # 2 % of 500, exactly: the share is a running sum, not a draw
                w = mirror.window()
                assert w.ok == 10 and w.latency.count == 10 and mirror.window().ok == 0  # a window, then a fresh one

            await with_gateway(primary, shadow.url, ShadowBudget(share=0.02, max_rps=1000), fn)

    asyncio.run(main())


def test_the_budget_caps_the_shadow_rate_whatever_the_share():
    async def main():
        async with StubWorker(b"primary") as primary, StubWorker(b"shadow") as shadow:
            async def fn(client, gw):
                t0 = time.monotonic()
                await send(client, 300)
                elapsed = time.monotonic() - t0
                await asyncio.sleep(0.3)
                mirror = gw.shadows["cnn"]
                # half of 300 wanted; the budget allows its one-second bank plus its rate over the elapsed time
                assert len(shadow.bodies) <= 5 + 5 * elapsed + 1 < 150
                assert mirror.counts["over_budget"] == 150 - mirror.counts["sent"]

            await with_gateway(primary, shadow.url, ShadowBudget(share=0.5, max_rps=5), fn)

    asyncio.run(main())


def test_a_full_queue_drops_and_counts_and_the_clients_never_wait_for_a_hung_shadow():
    async def main():
        async with StubWorker(b"primary") as primary, StubWorker(b"shadow", behave="hang") as shadow:
            async def fn(client, gw):
                t0 = time.monotonic()
                answers = await send(client, 100)
                assert time.monotonic() - t0 < 5  # a hung shadow would hold them 10 s each (its timeout)
                assert {r.content for r in answers} == {b'{"who":"primary"}'}
                c = gw.shadows["cnn"].counts
                # 50 mirrored: 1 in flight (one sender), 2 queued, the rest dropped
                assert c["sent"] == 1 and c["dropped"] == 47 and len(shadow.bodies) == 1
                mirror = await gw.unshadow("cnn")
                assert mirror is not None and mirror.counts["dropped"] == 49  # what was still queued, too

            await with_gateway(primary, shadow.url, ShadowBudget(share=0.5, max_rps=1000, queue=2, senders=1), fn)

    asyncio.run(main())


@pytest.mark.parametrize("how", ["refused", "500", "close"])
def test_a_failing_shadow_never_reaches_the_client_and_is_counted(how):
    async def main():
        async with StubWorker(b"primary") as primary, StubWorker(b"shadow", behave="close" if how == "close" else "answer",
                                                                  status=500) as broken:  # fmt: skip
            url = f"http://127.0.0.1:{free_port()}" if how == "refused" else broken.url

            async def fn(client, gw):
                answers = await send(client, 40)
                await asyncio.sleep(0.5)
                assert {(r.status_code, r.content) for r in answers} == {(200, b'{"who":"primary"}')}
                c = gw.shadows["cnn"].counts
                assert c["sent"] == 20 and c["failed"] == 20 and c["ok"] == 0
                assert gw.failures == {}  # the gateway's own failures are the clients'
                assert gw.shadows["cnn"].window().failed == 20

            await with_gateway(primary, url, ShadowBudget(share=0.5, max_rps=1000, queue=64), fn)

    asyncio.run(main())


def test_a_refused_primary_request_is_not_mirrored():
    async def main():
        async with StubWorker(b"primary", status=400) as primary, StubWorker(b"shadow") as shadow:
            async def fn(client, gw):
                answers = await send(client, 20)
                await asyncio.sleep(0.2)
                assert {r.status_code for r in answers} == {400} and shadow.bodies == []

            await with_gateway(primary, shadow.url, ShadowBudget(share=0.5, max_rps=1000), fn)

    asyncio.run(main())


def test_offer_never_blocks_even_before_anything_sends():
    async def main():
        mirror = ShadowMirror("http://127.0.0.1:9", ShadowBudget(share=0.5, max_rps=1e6, queue=3))  # never started
        t0 = time.perf_counter()
        taken = [mirror.offer(b"/p", b"x", []) for _ in range(1000)]
        assert (time.perf_counter() - t0) < 0.5
        assert sum(taken) == 3 and mirror.counts["dropped"] == 497
        await mirror.close()

    asyncio.run(main())


@pytest.mark.parametrize("field,value", [("share", 0.0), ("share", 0.9), ("max_rps", 0.0), ("queue", 0), ("timeout_s", -1)])
def test_a_bad_budget_is_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"'{field}'"):
        ShadowBudget(**{field: value})


def test_a_shadow_needs_a_routed_model():
    async def main():
        with pytest.raises(ValueError, match="not routed"):
            await Gateway().shadow("nope", "http://127.0.0.1:9")

    asyncio.run(main())
