"""RLTune (SoCC'25, our reading): a learned queue order for gang-scheduled multi-GPU batch jobs plus a MILP that
maps the chosen job onto nodes so the cluster stays unfragmented.

Modules, one job each: ``cluster`` (node pools and the paper's cluster shapes), ``traces`` (Philly / Alibaba /
Helios-like loaders, held-out sequences), ``mapper`` (MILP + greedy fallback), ``env`` (the batch-queue event
simulation), ``features`` (what a queue policy sees), ``policies`` (queue policies by name), ``service_queue`` (what the tuning
service calls for jobs waiting on a lease), ``net`` / ``ppo`` (the policy network and its training), ``evaluate``
(metrics, report, plots), ``scenario`` (batch-queue scenarios for ``oltunes simulate``).
"""
