"""The engine: a strategy's proposals evaluated under a budget (:mod:`.evaluator`), pipelined with the
compile stage (:mod:`.pipeline_depth`), behind :func:`~pytest_autotune.engine.tuner.tune` (:mod:`.tuner`).
Usable without pytest."""
