"""The tuning service: a thin FastAPI router over one `Tuner`.

The service validates requests (pydantic models from `oltunes.service.api`), serialises access to the tuner with
one lock (handlers run on the event loop and on the thread pool, the persister on its own thread), delegates,
and persists the tuner's state. Every
decision is the tuner's: nothing here chooses, scores or learns.

Start it with ``oltunes tuner serve`` or `serve`; build the ASGI app alone with `create_app` (tests do).

Safety rules
------------
- When a token is set, every route except ``GET /v1/health`` requires ``Authorization: Bearer <token>``
  (401 otherwise; the comparison is constant-time): ``/metrics`` and ``/openapi.json`` included; the ``/docs``
  and ``/redoc`` pages are off (a browser cannot send the header). Without a token (loopback only) all are open.
- `oltunes.netaddr.check_bind` refuses a non-loopback address without a token (`serve` calls it before binding).
- Bad input is a 4xx whose ``detail`` names the field and never echoes the input (``guards``): 413 for a body
  over ``max_body_bytes`` (checked before parsing), 422 from validation (finite numbers, limits, the id pattern
  of `oltunes.types`), 422 with the tuner's own reason when it rejects the request (e.g. an unknown pool); the
  server keeps serving. Variants added over HTTP may only point at files inside the model store.
- An answered ``observe`` is durable: accepted measurements are appended to the observe journal and fsynced
  before the answer (``journal``). The state file (atomic: temp file, fsync, ``os.replace``) is written every
  ``persist_every_s`` seconds when something changed, and on shutdown; each write compacts the journal.
"""

from __future__ import annotations

import hmac
import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from oltunes.errors import OLTunesError
from oltunes.netaddr import check_bind
from oltunes.rltune.policies import QueuePolicy
from oltunes.rltune.service_queue import queue_order
from oltunes.service import guards
from oltunes.service.api import (
    API_PREFIX,
    MAX_BODY_BYTES,
    ExpectResponse,
    HealthResponse,
    ObserveRequest,
    ObserveResponse,
    RecommendRequest,
    RecommendResponse,
    VariantsRequest,
    VariantsResponse,
)
from oltunes.service.journal import JournalWriteError
from oltunes.allocator.api import lease_router
from oltunes.allocator.types import LeaseForbidden
from oltunes.allocator.book import LeaseBook
from oltunes.service.metrics import TunerMetrics
from oltunes.service.served import Persister, ServedTuner, TunerService
from oltunes.types import Pool

log = logging.getLogger(__name__)

# Errors the tuner raises on input it cannot use (unknown pool, bad job): the caller's fault, so a 4xx.
_CLIENT_ERRORS = (OLTunesError, ValueError, LookupError)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("oltunes")
    except Exception:  # not installed as a distribution (e.g. run from a source tree)
        return "0+unknown"


def _bearer_is(request: Request, token: str | None) -> bool:
    """Whether the request's ``Authorization: Bearer`` is `token` (constant-time; the scheme case-insensitive,
    RFC 7235)."""
    if not token:
        return False
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return hmac.compare_digest(given.strip().encode(), token.encode()) and scheme.lower() == "bearer"


def _auth_dependency(token: str | None, admin_token: str | None = None):
    # async: a sync dependency would cost every request a thread-pool hop
    async def require_token(request: Request) -> None:
        if not token:
            return
        if not (_bearer_is(request, token) or _bearer_is(request, admin_token)):
            raise _Unauthorized()

    return require_token


class _Unauthorized(Exception):
    pass


def create_app(
    tuner: ServedTuner,
    *,
    token: str | None = None,
    state_path: str | Path | None = None,
    pools: Sequence[Pool] | None = None,
    persist_every_s: float = 30.0,
    max_body_bytes: int = MAX_BODY_BYTES,
    model_store: str | Path | None = None,
    queue_policy: str | QueuePolicy = "fcfs",
    class_limits: Mapping[str, int] | None = None,
    admin_token: str | None = None,
    advisory: bool = False,
) -> FastAPI:
    """Build the ASGI app serving `tuner`.

    Parameters
    ----------
    tuner
        The tuner to serve.
    token
        Bearer token; None or "" disables auth (only allowed on loopback, see `check_bind`).
    state_path
        JSON state file written periodically and on shutdown (None: never).
    pools
        Default cluster for requests without ``cluster`` (from ``--inventory``).
    persist_every_s
        Period of the background save; 0 saves only on shutdown (an answered observe is durable either way).
    max_body_bytes
        Larger request bodies are refused with 413 before they are read.
    model_store
        Folder that variants added over HTTP must point into (default: ``settings.zoo_dir``).
    queue_policy, class_limits
        With `pools`, the service allocates them (``/v1/leases``, `oltunes.allocator.book`): the order of its
        queue (a ``QueuePolicy`` name) and the most jobs per accelerator class on one host.
    admin_token
        The operator's token (needs `token` too): it also passes wherever `token` does, and only it sees real lease
        ids in ``GET /v1/leases`` and may release any lease without its secret.
    advisory
        Advisory mode (``docs/decisions.md``): every answer places the job where `ADVISORY_BASELINE` would, with
        the tuner's own decision as its ``advice``; the tuner still learns every observation.
    """
    if advisory:
        from oltunes.tuner.advisory import ADVISORY_BASELINE, AdvisoryTuner, baseline_policy

        tuner = AdvisoryTuner(tuner, baseline_policy(ADVISORY_BASELINE, tuner.variants), predict=tuner.predict)
    service = TunerService(tuner, state_path=state_path, pools=pools, model_store=model_store)
    if pools:
        service.leases = LeaseBook(
            pools, service.decide, expect=service.expect, queue_policy=queue_order(queue_policy),
            class_limits=class_limits,
            path=None if service.state_path is None else service.state_path.with_name(service.state_path.name + ".leases"),
        )  # fmt: skip
    persister = Persister(service, persist_every_s)
    metrics = TunerMetrics(observed_total=lambda: service.tuner.n_observed)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            service.persist()  # compact what the journal restored
        except Exception:
            log.exception("could not persist tuner state to %s (the journal keeps it)", service.state_path)
        persister.start()
        try:
            yield
        finally:
            persister.stop()
            try:
                service.persist()
            except Exception:
                log.exception("could not persist tuner state on shutdown to %s", service.state_path)
            if service.journal is not None:
                service.journal.close()

    for name, value in (("token", token), ("admin_token", admin_token)):
        if value and not value.strip():
            raise ConfigError(f"{name}: is only whitespace (it would match nothing); set a real token or none")
    if admin_token and not token:
        raise ConfigError("admin_token: needs a token too (without one, every route is open)")
    require_token = _auth_dependency(token or None, admin_token or None)
    # With a token, nothing but /v1/health is open: the schema and the metrics need the token as well, and the
    # interactive docs pages (a browser cannot send the bearer header to fetch the schema) are off.
    docs = {} if not token else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="OLTunes tuning service", version=_version(), lifespan=lifespan, **docs)
    app.state.service = service
    guards.install(app, max_body_bytes)

    @app.exception_handler(_Unauthorized)
    async def _unauthorized(request: Request, exc: _Unauthorized) -> JSONResponse:
        return JSONResponse(
            status_code=401,
            content={"detail": "missing or wrong bearer token (header 'Authorization: Bearer <token>')"},
            headers={"WWW-Authenticate": "Bearer"},
        )

    async def _rejected(request: Request, exc: Exception) -> JSONResponse:
        # The tuner refused this input; the message is its reason (it names the field or the unknown name).
        return JSONResponse(status_code=422, content={"detail": guards.describe(exc)})

    for exc_type in _CLIENT_ERRORS:
        app.add_exception_handler(exc_type, _rejected)

    @app.exception_handler(LeaseForbidden)
    async def _not_holder(request: Request, exc: LeaseForbidden) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": guards.short(str(exc))})

    @app.exception_handler(JournalWriteError)
    async def _storage_full(request: Request, exc: JournalWriteError) -> JSONResponse:
        # Nothing of the request was acknowledged (the journal cut back its partial write): retrying later is safe.
        return JSONResponse(status_code=507, content={"detail": guards.short(str(exc))})

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        # A bug, not bad input: answer 500 with the reason (uvicorn logs the traceback) and keep serving.
        return JSONResponse(status_code=500, content={"detail": f"internal error: {guards.describe(exc)}"})

    public = APIRouter(prefix=API_PREFIX)
    private = APIRouter(prefix=API_PREFIX, dependencies=[Depends(require_token)])

    # recommend/observe/health are `async def` and call the tuner directly: a recommend is ~1 ms of CPU, less
    # than the thread-pool hop a sync handler costs, and the GIL would serialise the work anyway. The rare,
    # larger state/variants routes stay sync (thread pool) so they never hold up the event loop.
    @public.get("/health", response_model=HealthResponse)
    async def health() -> HealthResponse:
        return HealthResponse(
            version=app.version,
            n_variants=len(service.tuner.variants),
            n_observed=service.n_observed,
            n_observed_total=service.tuner.n_observed,
            uptime_s=time.monotonic() - service.started,
            auth=bool(token),
        )

    @private.post("/recommend", response_model=RecommendResponse)
    async def recommend(req: RecommendRequest) -> RecommendResponse:
        t0 = time.perf_counter()
        decision = service.recommend(req)
        metrics.decided(decision, time.perf_counter() - t0)
        return RecommendResponse(decision=decision)

    @private.post("/expect", response_model=ExpectResponse)
    async def expect(req: RecommendRequest) -> ExpectResponse:
        return ExpectResponse(predicted=service.expect_for(req))

    @private.post("/observe", response_model=ObserveResponse)
    async def observe(req: ObserveRequest) -> ObserveResponse:
        answer = service.observe(req.measurements)
        await run_in_threadpool(service.sync)  # durable before the answer; the loop serves others meanwhile
        metrics.observed(answer.accepted, answer.duplicates)
        return answer

    @private.get("/state")
    def state() -> dict[str, Any]:
        return service.snapshot()

    @private.get("/variants", response_model=VariantsResponse)
    def variants() -> VariantsResponse:
        return VariantsResponse(variants=service.variants())

    @private.post("/variants", response_model=VariantsResponse)
    def add_variants(req: VariantsRequest) -> VariantsResponse:
        return VariantsResponse(variants=service.add_variants(req.variants))

    if token:
        @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_token)])
        async def openapi() -> JSONResponse:
            return JSONResponse(app.openapi())

    @app.get("/metrics", include_in_schema=False, dependencies=[Depends(require_token)])
    async def prometheus() -> Response:  # for scrapers, beside /v1 as on the gateway and the workers
        body, content_type = metrics.exposition()
        return Response(content=body, media_type=content_type)

    if service.leases is not None:
        private.include_router(lease_router(service.leases, is_admin=lambda request: _bearer_is(request, admin_token)))
    app.include_router(public)
    app.include_router(private)
    return app


def serve(
    tuner: ServedTuner,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    state_path: str | Path | None = None,
    pools: Sequence[Pool] | None = None,
    persist_every_s: float = 30.0,
    log_level: str = "info",
    queue_policy: str | QueuePolicy = "fcfs",
    class_limits: Mapping[str, int] | None = None,
    admin_token: str | None = None,
    advisory: bool = False,
) -> None:
    """Serve `tuner` with uvicorn until interrupted (state persisted on the way out). `admin_token` defaults to
    ``OLTUNES_TUNER_ADMIN_TOKEN``."""
    import uvicorn

    check_bind(host, token, service="tuner", token_setting="OLTUNES_TUNER_TOKEN")
    if admin_token is None:
        from oltunes.config import get_settings

        secret = get_settings().tuner_admin_token
        admin_token = secret.get_secret_value() if secret else None
    app = create_app(tuner, token=token, state_path=state_path, pools=pools, persist_every_s=persist_every_s,
                     queue_policy=queue_policy, class_limits=class_limits, admin_token=admin_token, advisory=advisory)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


@contextmanager
def serve_in_thread(
    app: FastAPI, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 20.0
) -> Iterator[str]:
    """Run `app` under a real uvicorn server in a background thread; yield its base URL; stop it on exit.

    ``port=0`` picks a free port (the socket is bound here, before uvicorn starts, so there is no race).
    The lifespan runs as in `serve`, so leaving the block persists the state. For tests and benchmarks.
    """
    import uvicorn

    # proto must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only then, and
    # without it every response waits ~40 ms for the client's delayed ACK (Nagle).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    bound_port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="tuner-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"uvicorn did not start on {host}:{bound_port} within {start_timeout_s:g}s")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
