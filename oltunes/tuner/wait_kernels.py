"""Kept only so that ``estimate.py`` (another part's module) still imports ``request_waits`` from here: the numpy
computation lives in ``candidates.request_waits``. Delete this file once ``estimate.py`` imports it from there."""

from oltunes.tuner.candidates import request_waits

__all__ = ["request_waits"]
