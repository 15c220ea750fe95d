"""The lock-and-gate lifecycle of one kernel call, without pytest (filled in by the next commits)."""
