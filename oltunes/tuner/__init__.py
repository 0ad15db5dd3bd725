"""The tuning service core: ``Tuner`` (ask/tell), candidates, co-running groups, priors, state."""

from oltunes.tuner.core import TARGETS, Tuner
from oltunes.tuner.prior import HeuristicPrior, Prior, ProfilePrior
from oltunes.tuner.protocol import TunerLike

__all__ = ["Tuner", "TARGETS", "Prior", "HeuristicPrior", "ProfilePrior", "TunerLike"]
