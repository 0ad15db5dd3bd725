"""The placement options a cluster offers a decision, kept between decisions while nothing they read changed.

Who runs where is an index (`oltunes.tuner.occupancy`) synced from each decision's cluster by what changed; the
options (`candidates.placement_options`) are built from it and the members' measured loads. The same pools, an
unchanged index and no observation since give the very same options as last time, so they are kept: the same
objects, with what they cache, and a list whose identity lets a recalled decision (`oltunes.tuner.recall`) be found
at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import is_

from oltunes.tuner.candidates import PlacementOption, placement_options
from oltunes.tuner.catalogue import Catalogue
from oltunes.tuner.estimate import Estimator
from oltunes.tuner.occupancy import Occupancy
from oltunes.types import ClusterState, Placement, Pool

__all__ = ["ClusterOptions"]


class ClusterOptions:
    """``of(cluster, current, exclude)``: the placement options and whether every device is full."""

    def __init__(self, estimator: Estimator, catalogue: Catalogue) -> None:
        self.estimator, self.catalogue = estimator, catalogue
        self.occupancy = Occupancy()  # who runs where, synced from each decision's cluster by what changed
        self._last: tuple | None = None  # (key, pools, (options, no_capacity)) of the last decision

    def of(self, cluster: ClusterState, current: Placement | None,
           exclude: str | None) -> tuple[list[PlacementOption], bool]:
        """The index synced to ``cluster`` (less the placement of job ``exclude``) and its options; ``current``'s
        device is one of them when it has a free slot."""
        self.occupancy.sync(cluster.placements, exclude=exclude)
        return self.kept(cluster.pools, current)

    def kept(self, pools: Sequence[Pool], current: Placement | None) -> tuple[list[PlacementOption], bool]:
        """The options of the last decision when nothing they read changed (the members' loads are read per
        observation), else new ones."""
        include = (current.pool, current.device) if current is not None else None
        key = (self.occupancy.generation, include, self.estimator.n_learned, self.catalogue.version)
        hit = self._last
        if hit is not None and hit[0] == key and len(hit[1]) == len(pools) and all(map(is_, hit[1], pools)):
            return hit[2]
        out = self.build(pools, current)
        self._last = (key, list(pools), out)
        return out

    def build(self, pools: Sequence[Pool], current: Placement | None) -> tuple[list[PlacementOption], bool]:
        """The options from the index; with no free slot anywhere, every pool's least-loaded device (to name the
        best available) and ``no_capacity``."""
        include = (current.pool, current.device) if current is not None else None
        # a placed job's load is its measured one (moved by an observation) or its prior's (by the catalogue)
        loads = {"load_of": self.estimator.load_of,
                 "loads_version": (self.estimator.n_learned, self.catalogue.version)}
        options = placement_options(pools, self.occupancy, include=include, **loads)
        no_capacity = not options
        if no_capacity:
            options = placement_options(pools, self.occupancy, ignore_capacity=True, **loads)
        return options, no_capacity
