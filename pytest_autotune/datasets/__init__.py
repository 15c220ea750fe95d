"""Recorded (brute-forced) GPU tuning data, loaded into the engine's own types.

Three community formats are read, recognised from their content rather than
their folder or extension (``.json`` and gzip-compressed ``.json.gz`` alike):

* **T4** results (``results[]``): every configuration with ``invalidity``,
  ``measurements[]`` (the entry named ``time``) and ``times.runtimes[]``. T4
  files carry no search-space definition; that comes from the T1 file of the
  same kernel (``ConfigurationSpace.TuningParameters[]`` and ``Conditions[]``).
* **Kernel Tuner cache** (``tune_params``, ``tune_params_keys``, ``cache``
  keyed by the comma-joined values; ``time`` a number or a failure string).
* **KTT** output (``Results[].Configuration[]``, ``ComputationResults[]`` with
  ``Duration`` in ``Metadata.TimeUnit`` (microseconds by default),
  ``Status``, optional ``ProfilingData.Counters[]``).

Each becomes a :class:`RecordedSpace`: a :class:`~pytest_autotune.space.SearchSpace`
plus per-row arrays aligned with the space's rows (row ``r`` of ``times`` is
the configuration ``space.get(r)``). Times are always milliseconds.

Failure mapping (to :class:`~pytest_autotune.results.FailureKind`):

================================  ==============================================
source                            kind
================================  ==============================================
T4 ``invalidity``                 ``correct`` -> ok; ``compile`` -> COMPILE;
                                  ``runtime`` -> RUNTIME; ``timeout`` -> TIMEOUT;
                                  ``correctness`` -> WRONG_OUTPUT (it ran, the
                                  output was wrong); ``constraints`` -> INVALID
                                  (rejected before launch); anything else -> the
                                  kind of the ``time`` measurement's failure
                                  string when it has one, else RUNTIME.
Kernel Tuner ``time`` string      ``InvalidConfig`` -> INVALID;
                                  ``CompilationFailedConfig`` -> COMPILE;
                                  ``RuntimeFailedConfig`` -> RUNTIME; any other
                                  string -> RUNTIME.
KTT ``Status``                    ``Ok`` -> ok; ``ComputationFailed`` -> RUNTIME;
                                  ``CompilationFailed`` -> COMPILE;
                                  ``ValidationFailed`` -> WRONG_OUTPUT;
                                  ``DeviceLimitsExceeded`` -> INVALID;
                                  anything else -> RUNTIME.
================================  ==============================================

A configuration recorded as successful whose time is missing, not a number or
not finite is recorded as RUNTIME too: ``times`` is finite exactly where
``failures`` is ``None``.

Each configuration's recorded costs besides its timed runs (compile,
verification, framework overhead) are in :attr:`RecordedSpace.costs`
(:mod:`~pytest_autotune.datasets.costs` says which field of each format they
come from); the simulated clock (:mod:`pytest_autotune.simulation`) charges them.

One module per format (:mod:`.t1`, :mod:`.t4`, :mod:`.kerneltuner`,
:mod:`.ktt`), :mod:`.recorded` for the assembled space and :mod:`.load` for
loading and discovery; every public name is importable from here.
"""
from __future__ import annotations

from .common import MEASURED_FORMATS, SPACES_ENV, DatasetError, PathLike, default_spaces_root, detect_format
from .costs import STAGES as COST_STAGES
from .costs import CostTable
from .kerneltuner import KERNEL_TUNER_COST_FIELDS, KERNEL_TUNER_FAILURE_TEXT, KERNEL_TUNER_FAILURES, kernel_tuner_cache
from .ktt import KTT_COST_FIELDS, KTT_FAILURES
from .load import clear_cache, discover, load_dataset, sniff_format
from .recorded import RecordedSpace
from .t1 import SpaceDefinition, find_definition, load_definition
from .t4 import T4_COST_FIELDS, T4_FAILURES

__all__ = [
    "COST_STAGES",
    "CostTable",
    "DatasetError",
    "KERNEL_TUNER_COST_FIELDS",
    "KERNEL_TUNER_FAILURES",
    "KERNEL_TUNER_FAILURE_TEXT",
    "KTT_COST_FIELDS",
    "KTT_FAILURES",
    "MEASURED_FORMATS",
    "PathLike",
    "RecordedSpace",
    "SPACES_ENV",
    "SpaceDefinition",
    "T4_COST_FIELDS",
    "T4_FAILURES",
    "clear_cache",
    "default_spaces_root",
    "detect_format",
    "discover",
    "find_definition",
    "kernel_tuner_cache",
    "load_dataset",
    "load_definition",
    "sniff_format",
]
