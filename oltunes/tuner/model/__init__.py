"""What a candidate would do: ``log metric = log prior + learned correction + FM-FTML residual``.

``prior`` (cold-start figures), ``correction*`` (crossed effects pooled over accelerators, variants and batch sizes,
fitted by backfitting), ``growth_scale``/``elasticity``/``intensity`` (the correction's slopes), ``estimate``
(every candidate of a decision at once, with margins) and ``estimate_learning`` (a measurement becomes learning
rows). docs/tuner-model.md walks through it.
"""
