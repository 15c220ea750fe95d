"""Recorded spaces on simulated time: the clock that charges recorded costs, the replay runner, simulated searches.

The replay runner answers each configuration from a recorded brute-forced space
(:mod:`pytest_autotune.datasets`); the clock (:mod:`.clock`) charges what that
evaluation would have cost on P compile workers and one device, so a whole
search can be timed without a GPU (:mod:`.search`).
"""
from .clock import NO_DEVICE, Charge, CostCharger, CostModel, Pipeline, Span
from .search import SimulatedRun, replay_sequence, simulate_fleet_search, simulate_search

__all__ = ["Charge", "CostModel", "Pipeline", "Span", "CostCharger", "SimulatedRun", "simulate_search",
           "simulate_fleet_search", "replay_sequence", "NO_DEVICE"]
