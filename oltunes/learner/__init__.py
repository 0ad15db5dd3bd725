"""Online learner: FTML optimizer, factorization machines, the shared feature encoding, uncertainty."""

from oltunes.learner.features import JobContext, encode, job_context
from oltunes.learner.fm import (
    ONLINE_SETTINGS,
    FMRegressor,
    MultiFMRegressor,
    RiverFMRegressor,
)
from oltunes.learner.ftml import FTML
from oltunes.learner.uncertainty import ResidualQuantiles

__all__ = ["FTML", "ONLINE_SETTINGS", "FMRegressor", "JobContext", "MultiFMRegressor", "ResidualQuantiles", "RiverFMRegressor", "encode", "job_context"]
