"""The tuner: ask (``decide``, ``expect``) and tell (``observe``) over an FM-FTML performance model.

* `Tuner` (``tuner.py``) — the in-process tuner; `StateFileTuner` (``local.py``) — one bound to its state file;
  `get_tuner` (``factory.py``) — the one the settings select (in process, or the HTTP client).
* ``model/`` — what a candidate would do: the prior, the learned correction over it, the FM-FTML residual.
* ``decide/`` — which candidate: placement options, constraints (co-runners included), objectives, selection, the
  explanation.
* `TunerLike` (``protocol.py``) — the one interface flows, the lease book and the simulator call.
"""

from oltunes.tuner.model.prior import HeuristicPrior, Prior, ProfilePrior
from oltunes.tuner.protocol import TunerLike
from oltunes.tuner.tuner import TARGETS, Tuner

__all__ = ["Tuner", "TARGETS", "Prior", "HeuristicPrior", "ProfilePrior", "TunerLike"]
