"""Fast construction of the valid configurations of a constrained space.

Why this is fast:

* single-parameter restrictions shrink that parameter's value list first;
* parameters are split into independent components (parameters that share no
  restriction never need to be enumerated together) and free parameters;
  components are built separately and crossed only at the end;
* inside a component, parameters are added one at a time in an order that
  completes restrictions as early as possible, and each restriction is applied
  the moment its last parameter is bound, on an ``n x m`` broadcast block
  (existing rows x new values) so repeated columns are never materialised;
* a block larger than ``chunk_rows`` is processed in row chunks, so the
  Cartesian product is never held in memory.

Why memory stays bounded: value indices are kept in the smallest unsigned
dtype from the first binding on (int64 only for row arithmetic inside one
chunk), and every step that would hold more than ``max_configurations``
rows, a component's partial configurations or the crossed valid set counted
before crossing, is refused before it allocates.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Any, Mapping, Sequence, Union

import numpy as np

from .errors import SearchSpaceError
from .bounds import spans_of
from .callables import CallableRestriction
from .expressions import Restriction as _Compiled

# an expression, or a callable over named parameters: both evaluate on broadcast blocks
Restriction = Union[_Compiled, CallableRestriction]

DEFAULT_CHUNK_ROWS = 1 << 22
# More rows than this (tens of GiB of index columns) are refused with an error, not a crash.
MAX_ROWS = 1 << 31
# Valid configurations a space may hold unless told otherwise. Sized for a 4 GB CI runner: a row costs
# its key (8 bytes, int64) plus one index byte per parameter (uint8 for up to 256 values), ~18 bytes for
# 10 parameters, and construction peaks at about that (keys sorted in place, indices filled in place),
# so 50 million rows stay under ~1 GB with room for the interpreter, the test and the engine's queries.
DEFAULT_MAX_CONFIGURATIONS = 50_000_000
LIMIT_HINT = "the ini option autotune_max_configurations; SearchSpace(max_configurations=...) outside pytest"


class SearchSpaceTooLarge(SearchSpaceError):
    """The space (or a step of its construction) holds more configurations than the limit allows."""

    def __init__(self, message: str, size: int, limit: int):
        super().__init__(message)
        self.size, self.limit = size, limit


def index_dtype(max_size: int) -> np.dtype:
    """Smallest unsigned dtype that holds the value indices of a parameter with ``max_size`` values."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if max_size <= np.iinfo(dt).max + 1:
            return np.dtype(dt)
    return np.dtype(np.int64)


def resolve_limit(max_configurations: int | None) -> int:
    """The limit in force: the default for None; a positive integer otherwise."""
    if max_configurations is None:
        return DEFAULT_MAX_CONFIGURATIONS
    if isinstance(max_configurations, bool) or not isinstance(max_configurations, (int, np.integer)) \
            or max_configurations < 1:
        raise SearchSpaceError(f"max_configurations must be a positive integer, got {max_configurations!r}")
    return int(max_configurations)


def too_large(head: str, size: int, limit: int) -> SearchSpaceTooLarge:
    """The refusal: ``head`` names the size; the limit, how to raise it and what to do instead follow."""
    return SearchSpaceTooLarge(
        f"{head}; the limit is {limit:,} ({LIMIT_HINT}). Add restrictions that exclude configurations that "
        "cannot work, or use fewer values per parameter; or raise the limit where the machine has the memory "
        f"(about {_bytes_hint(size)} for these)", size, limit)


def _bytes_hint(size: int) -> str:
    gib = size * 24 / 2**30  # 8-byte key + ~10 one-byte indices + construction scratch, per configuration
    return f"{gib:,.1f} GiB" if gib >= 1 else f"{max(1.0, gib * 1024):.0f} MiB"


def _check_rows(n: int, what: str) -> None:
    if n > MAX_ROWS:
        raise SearchSpaceError(f"{what}: {n} configurations are too many to enumerate (limit {MAX_ROWS}); "
                               "add restrictions or split the space")


@dataclass
class BuildStep:
    """One binding step, kept for the empty-space diagnosis."""

    parameter: str
    restrictions: list[str]
    candidates: int
    survivors: int


@dataclass
class BuildResult:
    columns: list[np.ndarray]  # per parameter (original order): value index of each valid row, unsorted
    steps: list[BuildStep] = field(default_factory=list)


@dataclass
class BlockResult:
    """The valid set as independent blocks whose Cartesian product it is (not yet crossed)."""

    blocks: list[dict[str, np.ndarray]]  # per block: parameter -> value index of each of the block's rows
    steps: list[BuildStep] = field(default_factory=list)

    def columns(self, names: Sequence[str]) -> list[np.ndarray]:
        """Crossed columns in ``names`` order (unsorted), as :func:`build_columns` returns them."""
        selectors = _cross([len(next(iter(b.values()))) for b in self.blocks])
        merged: dict[str, np.ndarray] = {}
        for block, sel in zip(self.blocks, selectors):
            for q, col in block.items():
                merged[q] = col[sel] if len(self.blocks) > 1 else col
        return [merged[p] for p in names]


class _UnionFind:
    def __init__(self, items: Sequence[str]):
        self.parent = {i: i for i in items}

    def find(self, x: str) -> str:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def _as_block_mask(mask: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    return np.broadcast_to(mask, shape) if mask.shape != shape else mask


def _binding_order(component: list[str], restrictions: list[Restriction], sizes: Mapping[str, int]) -> list[str]:
    """Greedy order: bind next the parameter that completes most restrictions.

    Ties go to the parameter that appears in most still-open restrictions with
    already bound parameters, then to the smaller value list.
    """
    bound: set[str] = set()
    order: list[str] = []
    todo = set(component)
    while todo:
        def score(p: str) -> tuple:
            completes = sum(1 for r in restrictions if p in r.names and set(r.names) <= bound | {p})
            touches = sum(1 for r in restrictions if p in r.names and bound & set(r.names))
            occurs = sum(1 for r in restrictions if p in r.names)
            return (completes, touches, occurs, -sizes[p], -component.index(p))

        best = max(todo, key=score)
        order.append(best)
        bound.add(best)
        todo.remove(best)
    return order


def _partial_refusal(bound: list[str], size: int, limit: int, at_least: bool, last: bool) -> SearchSpaceTooLarge:
    count = f"more than {size:,}" if at_least else f"{size:,}"
    if last:  # every parameter of the group is bound, every restriction applied: these are valid configurations
        return too_large(f"the search space has {count} valid configurations", size, limit)
    return too_large(f"building the search space would hold {count} partial configurations of "
                     f"{', '.join(bound)} before the restrictions that involve other parameters prune them",
                     size, limit)


def _build_component(order: list[str], candidates: Mapping[str, np.ndarray], tables: Mapping[str, np.ndarray],
                     restrictions: list[Restriction], chunk_rows: int, steps: list[BuildStep],
                     limit: int) -> dict[str, np.ndarray]:
    """Bind ``order``'s parameters one at a time; columns keep ``candidates``' compact index dtype.

    Survivors of a restricted step are gathered chunk by chunk, so no
    full-length int64 parent array exists; a step whose rows would exceed
    ``limit`` is refused before (unrestricted) or while (restricted) it grows.
    """
    cols: dict[str, np.ndarray] = {}
    n = 1
    pending = list(restrictions)
    bound: list[str] = []
    for p in order:
        cand = candidates[p]
        m = len(cand)
        bound.append(p)
        completing = [r for r in pending if set(r.names) <= set(bound)]
        pending = [r for r in pending if r not in completing]
        if not completing:
            _check_rows(n * m, f"binding {p!r} before any restriction applies")
            if n * m > limit:
                raise _partial_refusal(bound, n * m, limit, at_least=False, last=len(bound) == len(order))
            new = {q: np.repeat(c, m) for q, c in cols.items()}
            new[p] = np.tile(cand, n)
            survivors = n * m
        else:
            needed = sorted({q for r in completing for q in r.names if q != p})
            new_values = tables[p][cand][None, :]
            per_block = max(1, chunk_rows // m)
            pieces: dict[str, list[np.ndarray]] = {q: [] for q in cols}
            pieces[p] = []
            survivors = 0
            for start in range(0, n, per_block):
                stop = min(n, start + per_block)
                env: dict[str, Any] = {q: tables[q][cols[q][start:stop]][:, None] for q in needed}
                env[p] = new_values
                shape = (stop - start, m)
                mask = None
                for r in completing:
                    hit = _as_block_mask(r.evaluate(env), shape)
                    mask = hit if mask is None else np.logical_and(mask, hit)
                hits = np.flatnonzero(mask)  # much cheaper than a 2-D nonzero
                survivors += len(hits)
                if survivors > limit:
                    raise _partial_refusal(bound, survivors, limit, at_least=stop < n, last=len(bound) == len(order))
                par = hits // m
                pieces[p].append(cand[hits - par * m])
                par += start
                for q, c in cols.items():
                    pieces[q].append(c[par])
                del env, mask, hits, par
            cols = {}  # the previous step's columns are no longer needed: free them before concatenating
            new = {}
            for q in list(pieces):
                ps = pieces.pop(q)
                new[q] = np.concatenate(ps) if len(ps) > 1 else ps[0]
                del ps
        steps.append(BuildStep(p, [r.source for r in completing], n * m, survivors))
        cols = new
        n = survivors
        if n == 0:
            break
    return cols


def _cross(sizes: list[int]) -> list[np.ndarray]:
    """Row selectors of the Cartesian product of blocks of the given sizes."""
    total = prod(sizes)
    _check_rows(total, "the valid configurations")
    out, inner = [], total
    for s in sizes:
        inner //= s
        outer = total // (inner * s)
        out.append(np.tile(np.repeat(np.arange(s), inner), outer))
    return out


def build_columns(names: Sequence[str], tables: Sequence[np.ndarray], restrictions: list[Restriction],
                  chunk_rows: int = DEFAULT_CHUNK_ROWS, max_configurations: int | None = None) -> BuildResult:
    """Enumerate the valid configurations as value-index columns (unsorted)."""
    built = build_blocks(names, tables, restrictions, chunk_rows, max_configurations)
    return BuildResult(built.columns(names), built.steps)


def build_blocks(names: Sequence[str], tables: Sequence[np.ndarray], restrictions: list[Restriction],
                 chunk_rows: int = DEFAULT_CHUNK_ROWS, max_configurations: int | None = None, *,
                 callables_follow: bool = False) -> BlockResult:
    """Enumerate the valid configurations of each independent block; their Cartesian product is the space.

    The product is counted, not built, here: more than ``max_configurations``
    (see :data:`DEFAULT_MAX_CONFIGURATIONS`) is refused before anything of
    that size is allocated. ``callables_follow`` words the refusal for a
    count that callable restrictions would still filter one by one.
    """
    limit = resolve_limit(max_configurations)
    table_of = dict(zip(names, tables))
    # int64 evaluation where it is exact over these values, Python integers where it could overflow
    spans = spans_of(table_of)
    restrictions = [r.for_values(spans) for r in restrictions]
    dtype = index_dtype(max(len(t) for t in tables))
    candidates = {p: np.arange(len(t), dtype=dtype) for p, t in table_of.items()}
    steps: list[BuildStep] = []
    multi: list[Restriction] = []
    for r in restrictions:
        if len(r.names) == 0:
            if not bool(np.all(r.evaluate({}))):
                raise SearchSpaceError(f"restriction {r.source!r} is always false: the search space is empty")
        elif len(r.names) == 1:
            p = r.names[0]
            keep = np.asarray(np.broadcast_to(r.evaluate({p: table_of[p][candidates[p]]}), candidates[p].shape))
            before = len(candidates[p])
            candidates[p] = candidates[p][keep]
            steps.append(BuildStep(p, [r.source], before, len(candidates[p])))
            if len(candidates[p]) == 0:
                raise SearchSpaceError(f"restriction {r.source!r} excludes every value of parameter {p!r}: "
                                       "the search space is empty")
        else:
            multi.append(r)

    uf = _UnionFind(list(names))
    for r in multi:
        for q in r.names[1:]:
            uf.union(r.names[0], q)
    groups: dict[str, list[str]] = {}
    for p in names:
        groups.setdefault(uf.find(p), []).append(p)

    blocks: list[dict[str, np.ndarray]] = []
    sizes = {p: len(c) for p, c in candidates.items()}
    for members in groups.values():
        rs = [r for r in multi if r.names[0] in members]
        if not rs:  # a free parameter: its (reduced) value list is its own block
            blocks.append({members[0]: candidates[members[0]]})
            continue
        order = _binding_order(members, rs, sizes)
        cols = _build_component(order, candidates, table_of, rs, chunk_rows, steps, limit)
        if not cols or len(next(iter(cols.values()))) == 0 or len(cols) < len(members):
            raise SearchSpaceError(empty_space_report(names, tables, restrictions, steps))
        blocks.append(cols)

    total = prod(len(next(iter(b.values()))) for b in blocks)
    if total > limit:
        raise too_large(f"the string restrictions leave {total:,} configurations for the callable restrictions to "
                        "check one at a time" if callables_follow else
                        f"the search space has {total:,} valid configurations", total, limit)
    _check_rows(total, "the valid configurations")
    return BlockResult(blocks, steps)


def empty_space_report(names: Sequence[str], tables: Sequence[np.ndarray], restrictions: list[Restriction],
                       steps: list[BuildStep]) -> str:
    """Say which restriction removed what, so the user sees what killed the space."""
    lines = ["the search space is empty: no configuration satisfies all restrictions."]
    table_of = dict(zip(names, tables))
    lines.append("Each restriction on its own (combinations of its parameters that satisfy it):")
    for r in restrictions:
        sub = [len(table_of[q]) for q in r.names]
        total = prod(sub) if sub else 1
        if total <= 2_000_000:
            grids = np.meshgrid(*[table_of[q] for q in r.names], indexing="ij") if r.names else []
            env = dict(zip(r.names, grids))
            ok = int(np.count_nonzero(np.broadcast_to(r.evaluate(env), tuple(sub))))
            lines.append(f"  {r.source!r}: {ok} of {total}")
        else:
            lines.append(f"  {r.source!r}: subspace of {total} combinations not counted")
    lines.append("Construction (configurations surviving after each binding step):")
    for s in steps:
        applied = ", ".join(repr(x) for x in s.restrictions) or "no restriction"
        lines.append(f"  bind {s.parameter!r} applying {applied}: {s.survivors} of {s.candidates}")
    return "\n".join(lines)


def apply_callables(names: Sequence[str], tables: Sequence[np.ndarray], indices: np.ndarray,
                    callables: list[CallableRestriction], chunk: int = 1 << 16) -> np.ndarray:
    """Row mask of callable restrictions that read the whole configuration, applied one configuration at a time.

    ``indices`` is the (rows x parameters) value-index matrix; rows become
    Python values a chunk at a time, so the object lists stay small.
    """
    n = len(indices)
    keep = np.ones(n, dtype=bool)
    if not callables or n == 0:
        return keep
    for start in range(0, n, chunk):
        part = indices[start:start + chunk]
        value_cols = [t[part[:, k]].tolist() for k, t in enumerate(tables)]
        for i, row in enumerate(zip(*value_cols), start):
            config = dict(zip(names, row))
            for fn in callables:
                if not fn.checked_call(config):
                    keep[i] = False
                    break
    return keep
