"""T1 search-space definitions (parameters and restrictions) and finding the one a T4 file belongs to."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..space import SearchSpace, SearchSpaceError, literal_values
from .common import DatasetError, PathLike, _read_json, _stem, detect_format

@dataclass
class SpaceDefinition:
    """Parameters and restrictions of a search space, from a T1 file."""

    name: str
    params: dict[str, list]
    restrictions: list[str]
    kernel: str = ""
    path: Path | None = None

    def build(self, constants: Mapping[str, Any] | None = None) -> SearchSpace:
        return SearchSpace(self.params, self.restrictions, constants)


def _definition_from_doc(doc: Any, where: str, name: str, path: Path | None) -> SpaceDefinition:
    try:
        cs = doc["ConfigurationSpace"]
        tps = cs["TuningParameters"]
    except (KeyError, TypeError):
        raise DatasetError(f"{where}: not a T1 definition (no ConfigurationSpace.TuningParameters)") from None
    params: dict[str, list] = {}
    for tp in tps:
        try:
            pname, raw = tp["Name"], tp["Values"]
        except (KeyError, TypeError):
            raise DatasetError(f"{where}: tuning parameter {tp!r} lacks Name or Values") from None
        try:
            values = literal_values(raw) if isinstance(raw, str) else list(raw)
        except (SearchSpaceError, TypeError) as exc:
            raise DatasetError(f"{where}: parameter {pname!r}: {exc}") from exc
        params[pname] = values
    restrictions = []
    for cond in cs.get("Conditions") or []:
        expr = cond.get("Expression") if isinstance(cond, Mapping) else cond
        if not isinstance(expr, str):
            raise DatasetError(f"{where}: condition {cond!r} has no Expression string")
        restrictions.append(expr)
    kernel = (doc.get("General") or {}).get("BenchmarkName") or (doc.get("KernelSpecification") or {}).get(
        "KernelName") or name
    return SpaceDefinition(name=name, params=params, restrictions=restrictions, kernel=str(kernel), path=path)


def load_definition(definition: PathLike | Mapping[str, Any] | SpaceDefinition) -> SpaceDefinition:
    """A T1 definition from a path, a parsed T1 document, or a :class:`SpaceDefinition` (returned as is)."""
    if isinstance(definition, SpaceDefinition):
        return definition
    if isinstance(definition, Mapping):
        name = str((definition.get("General") or {}).get("BenchmarkName") or "definition")
        return _definition_from_doc(definition, f"T1 definition {name!r}", name, None)
    path = Path(definition)
    return _definition_from_doc(_read_json(path), str(path), _stem(path), path)


def find_definition(path: PathLike) -> Path:
    """The T1 definition of a T4 file ``<root>/t4/<kernel>_<gpu>.json.gz``: ``<root>/t1/<kernel>.json``.

    Looks in ``<root>/t1``, then a ``t1`` folder beside the file, then the
    file's own folder; the longest ``<kernel>`` that prefixes the file name
    (followed by ``_`` or nothing) wins, and only files that really are T1
    definitions count.
    """
    path = Path(path)
    name = _stem(path)
    candidates: list[tuple[int, int, Path]] = []
    dirs = [path.parent.parent / "t1", path.parent / "t1", path.parent]
    seen: set[Path] = set()
    for order, d in enumerate(dirs):
        if not d.is_dir() or d.resolve() in seen:
            continue
        seen.add(d.resolve())
        for f in d.iterdir():
            if not f.is_file() or f.resolve() == path.resolve():
                continue
            if not (f.name.endswith(".json") or f.name.endswith(".json.gz")):
                continue
            kernel = _stem(f)
            if name == kernel or name.startswith(kernel + "_"):
                candidates.append((-len(kernel), order, f))
    for _, _, f in sorted(candidates):
        try:
            if detect_format(_read_json(f)) == "t1":
                return f
        except DatasetError:
            continue
    raise DatasetError(f"{path}: T4 results carry no search-space definition and no T1 file named after a prefix "
                       f"of {name!r} was found in {', '.join(str(d) for d in dirs[:2])} or beside the file; "
                       "pass definition=<path to the T1 .json>")

