"""Backends: one record per kernel language and per backend (:mod:`.registry`), read by every other layer.

``register(Backend(...))`` adds one; the built-ins are in :mod:`.builtin`. See
``docs/explanation/architecture.md`` ("Adding a backend").
"""
from __future__ import annotations

from .registry import (Backend, Language, backends, cpu_probed_kinds, device_constants, for_language, for_suffix,
                       get, language, languages, lock_kinds, register, register_language, unregister)

__all__ = ["Backend", "Language", "backends", "cpu_probed_kinds", "device_constants", "for_language", "for_suffix",
           "get", "language", "languages", "lock_kinds", "register", "register_language",
           "unregister"]
