"""Measurement and verification: timing statistics, early stopping, rank tests (:mod:`.timing`) and the
comparison of a kernel's outputs with the reference (:mod:`.verify`). Depends on nothing else in the package."""
