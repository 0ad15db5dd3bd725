"""The tuner as a served object: one lock around it, durable observe (the journal), periodic persistence.

`oltunes.service.app` puts HTTP in front of this; nothing here knows about requests beyond their models.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from oltunes.errors import ConfigError, OLTunesError
from oltunes.service import guards
from oltunes.service.api import ObserveResponse, RecommendRequest
from oltunes.service.journal import ObserveJournal, fsync_dir
from oltunes.tuner.state import state_lock, write_state
from oltunes.types import ClusterState, Decision, Measurement, Pool, Prediction

if TYPE_CHECKING:
    from oltunes.allocator.book import LeaseBook

log = logging.getLogger(__name__)


class ServedTuner(Protocol):
    """What the service needs from the tuner (`oltunes.tuner.Tuner` provides it)."""

    variants: Sequence[Any]
    n_observed: int

    def decide(self, job: Any, cluster: ClusterState, current: Any = None) -> Decision: ...

    def expect(self, job: Any, cluster: ClusterState) -> Prediction: ...

    def observe(self, m: Measurement) -> bool: ...

    def observe_many(self, ms: Sequence[Measurement]) -> list[bool]: ...

    def has_seen(self, measurement_id: str) -> bool: ...

    def state_dict(self) -> dict[str, Any]: ...

    def add_variants(self, variants: Sequence[Any]) -> int: ...


class TunerService:
    """The tuner plus what serving it needs: a lock, a dirty flag and atomic persistence.

    Parameters
    ----------
    tuner
        The `Tuner` to serve (already loaded from its state file by the caller, if one exists).
    state_path
        Where `persist` writes the tuner's JSON state; None disables persistence.
    pools
        Default cluster (nothing placed) for requests that omit ``cluster``; None makes ``cluster`` required.
    model_store
        The only folder variants added over HTTP may point into (default: ``settings.zoo_dir``).

    With a `state_path`, the observe journal beside it (``<state>.journal/``) is replayed into `tuner` here:
    what an earlier process acknowledged but had not yet saved is learnt again (exactly-once by id).
    """

    def __init__(self, tuner: ServedTuner, *, state_path: str | Path | None = None,
                 pools: Sequence[Pool] | None = None, model_store: str | Path | None = None):
        self.tuner = tuner
        self.state_path = Path(state_path) if state_path is not None else None
        self.default_cluster = ClusterState(pools=list(pools)) if pools else None
        if model_store is None:
            from oltunes.config import get_settings

            model_store = get_settings().zoo_dir
        self.model_store = Path(model_store).resolve()
        self.lock = threading.Lock()
        self.leases: LeaseBook | None = None  # set when the service allocates its pools (`create_app`)
        self._persist_lock = threading.Lock()
        self.n_observed = 0
        self.started = time.monotonic()
        self._dirty = False
        self.journal = None
        if self.state_path is not None:
            self.journal = ObserveJournal(self.state_path.with_name(self.state_path.name + ".journal"))
            replayed = sum(1 for m in self.journal.replay() if self._learn(m))
            self._dirty = replayed > 0 or bool(self.journal.segments())  # a save compacts them
            if replayed:
                log.info("observe journal: %d acknowledged measurements restored", replayed)

    def _cluster_for(self, req: RecommendRequest) -> ClusterState:
        cluster = req.cluster if req.cluster is not None else self.default_cluster
        if cluster is None:
            raise ConfigError("cluster: required (this service was started without --inventory)")
        if self.leases is not None:  # the service allocates: what it leased runs there, whoever asks
            cluster = self.leases.with_leases(cluster, exclude=req.job.job_id)
        return cluster

    def recommend(self, req: RecommendRequest) -> Decision:
        cluster = self._cluster_for(req)
        with self.lock:
            # Not marked dirty: a decision only advances the exploration RNG, which is not worth a save.
            return self.tuner.decide(req.job, cluster, req.current)

    def expect_for(self, req: RecommendRequest) -> Prediction:
        cluster = self._cluster_for(req)
        return self.expect(req.job, cluster)

    def decide(self, job: Any, cluster: ClusterState) -> Decision:
        with self.lock:
            return self.tuner.decide(job, cluster)

    def expect(self, job: Any, cluster: ClusterState) -> Prediction:
        """The tuner's prediction for the job without deciding (`Tuner.expect`)."""
        with self.lock:
            return self.tuner.expect(job, cluster)

    def observe(self, measurements: Sequence[Measurement]) -> ObserveResponse:
        """Learn the new measurements and journal them (not yet fsynced: call `sync` before answering)."""
        with self.lock:
            new = [m for m in measurements if not self.tuner.has_seen(m.measurement_id)]
            if self.journal is not None:
                self.journal.append(new)  # a full disk fails here, before anything is learnt
            accepted: list[str] = [m.measurement_id for m, ok in zip(new, self._observe_all(new)) if ok]
            self.n_observed += len(accepted)
            self._dirty = self._dirty or bool(accepted)
        return ObserveResponse(accepted=len(accepted), duplicates=len(measurements) - len(accepted),
                               accepted_ids=accepted)

    def sync(self) -> None:
        """Make every observation answered so far durable (fsync of the journal)."""
        if self.journal is not None:
            self.journal.sync()

    def _observe_all(self, ms: Sequence[Measurement]) -> list[bool]:
        """Learn ``ms`` in one ``observe_many`` (the pooled correction is then fitted per chunk, as in-process
        batches are)."""
        return self.tuner.observe_many(ms) if ms else []

    def _learn(self, m: Measurement) -> bool:
        try:
            return self.tuner.observe(m)
        except (OLTunesError, ValueError) as e:  # refused when first sent too: journaled, never learnt
            log.warning("observe journal: measurement not learnt again: %s", guards.describe(e))
            return False

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return self.tuner.state_dict()

    def variants(self) -> list[Any]:
        with self.lock:
            return list(self.tuner.variants)

    def add_variants(self, variants: Sequence[Any]) -> list[Any]:
        for i, v in enumerate(variants):
            if v.path is not None and not Path(v.path).resolve().is_relative_to(self.model_store):
                # never echo the path: the reason is where it may point
                raise ConfigError(f"variants.{i}.path: must be a model file inside the model store "
                                  f"({self.model_store}); register it with `oltunes zoo register`")
        with self.lock:
            self.tuner.add_variants(variants)
            self._dirty = True
            return list(self.tuner.variants)

    def persist(self, force: bool = False) -> bool:
        """Write the state atomically if it changed since the last write (or `force`); True if written.

        The service lock is held for the snapshot and the journal rotation only (requests never wait for the
        disk). The state then holds everything in the sealed journal segments, which are deleted once the
        state file is durable; if the write fails they stay and are replayed on the next start.
        """
        if self.state_path is None:
            return False
        with self._persist_lock:  # one writer at a time (periodic thread vs shutdown)
            with self.lock:
                if not (self._dirty or force):
                    return False
                self._dirty = False
                state = self.tuner.state_dict()
                sealed = self.journal.rotate() if self.journal is not None else None
            try:
                with state_lock(self.state_path):
                    write_state(self.state_path, state)
            except BaseException:
                self._dirty = True  # retry next round
                raise
            if sealed is not None:
                fsync_dir(self.state_path.parent)  # the rename is durable before the segments go
                self.journal.drop_through(sealed)
        return True


class Persister:
    """Background thread calling `TunerService.persist` every `every_s` seconds until stopped."""

    def __init__(self, service: TunerService, every_s: float):
        self.service, self.every_s = service, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tuner-persist", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.service.persist()
            except Exception:  # a full disk must not kill the service; the next round retries
                log.exception("could not persist tuner state to %s", self.service.state_path)

    def start(self) -> None:
        if self.service.state_path is not None and self.every_s > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
