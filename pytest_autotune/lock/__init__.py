"""The lock: the tuned parameters a project commits, and everything that reads or writes them.

File format, canonical serialisation and locked merges (:mod:`.lockfile`), the
fingerprints of what a locked winner depends on (:mod:`.hashing`). Never
imports pytest, CuPy or PyCUDA: the code a team ships can import it.
"""
