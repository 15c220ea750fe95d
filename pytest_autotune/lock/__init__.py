"""The lock: the tuned parameters a project commits, and everything that reads or writes them.

File format, canonical serialisation and locked merges (:mod:`.lockfile`), the
fingerprints of what a locked winner depends on (:mod:`.hashing`), the
readable problem of an entry (:mod:`.problem`), the run-time lookup
(:mod:`.lookup`), exports for other build systems (:mod:`.export`) and the
warm start of a new device from the others' entries (:mod:`.transfer`). Never
imports pytest, CuPy or PyCUDA: the code a team ships can import it.
"""
