"""The package version (one place: the package root, the lock entries and the CLI read it)."""
__version__ = "0.1.0"
