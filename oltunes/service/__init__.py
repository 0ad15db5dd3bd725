"""The tuning service: a thin FastAPI app (``app``) over one tuner (``served``), with its durable runtime.

``api`` (request/response models, shared with the client), ``journal`` (an answered observe is on disk),
``seen`` (exactly-once ids), ``guards`` (body limits, errors that never echo input), ``metrics`` (Prometheus).
Start it with ``oltunes tuner serve``; the guarantees are in docs/durability.md.
"""
