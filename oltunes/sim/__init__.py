"""Trace-driven simulator of a heterogeneous GPU cluster: performance model, workloads, engine, metrics, report."""
