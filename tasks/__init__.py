"""Thin Prefect tasks around `oltunes` calls that do I/O.

Retries, timeouts and caching live here and nowhere else: a task retries only when retrying is safe (a worker
crash — the worker resumes from its atomic shards), and every task that can hang has a timeout. Tasks are
``async`` so that Prefect's timeout really interrupts them (blocking calls run in a thread, and the thread's own
call also carries a deadline so nothing outlives its task).
"""
