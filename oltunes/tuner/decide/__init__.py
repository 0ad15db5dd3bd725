"""Which candidate: one decision in five steps, each a module.

``candidates`` (placement options per pool) → ``evaluation`` (the scored grid) → ``constraints`` (memory,
accuracy, SLO, throughput; ``corunners``: does every job already on a device keep its SLO) → ``objectives``
(registered by name) → ``selection`` (choose, explore, stay or fall back) → ``decision`` + ``explain`` (the
`Decision` and why). ``grouping`` plans co-running groups for a set of jobs.
"""
