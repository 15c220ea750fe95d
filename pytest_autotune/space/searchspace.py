"""The constrained search space: valid configurations as an index matrix."""
from __future__ import annotations

import numbers
import operator
from math import prod
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, Union

import numpy as np

from . import neighbours as nb
from .build import DEFAULT_CHUNK_ROWS, apply_callables, build_blocks, index_dtype
from .errors import SearchSpaceError
from .callables import CallableRestriction, as_restriction_list, classify_callable, refused_restriction
from .expressions import Restriction, compile_restriction

RestrictionLike = Union[str, Callable[..., Any]]
Config = Union[Mapping[str, Any], Sequence[Any]]
NEIGHBOUR_METHODS = ("strictly-adjacent", "adjacent", "hamming", "index-distance")
# find() answers from a dict of value tuples up to this many rows (~250 bytes a row); beyond, by binary
# search of the keys (a few microseconds a call), so a large space never grows a dict many times its size
TUPLE_INDEX_ROWS = 1 << 20


def _value_table(name: str, values: Sequence[Any]) -> np.ndarray:
    """numpy array of a parameter's values: numeric dtype when possible, object otherwise."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise SearchSpaceError(f"parameter {name!r}: values must be a list, got {type(values).__name__}")
    values = list(values)
    if not values:
        raise SearchSpaceError(f"parameter {name!r} has an empty value list")
    for v in values:
        if not isinstance(v, (bool, numbers.Integral, numbers.Real, str, np.generic)):
            raise SearchSpaceError(f"parameter {name!r}: value {v!r} of type {type(v).__name__} "
                                   "is not allowed (int, float, str or bool)")
    seen: dict[Any, int] = {}
    for v in values:
        key = (type(v) is str, v)
        if key in seen:
            raise SearchSpaceError(f"parameter {name!r} lists the value {v!r} more than once")
        seen[key] = 1
    if all(type(v) is int for v in values) and -(2**63) <= min(values) and max(values) < 2**63:
        return np.array(values, dtype=np.int64)  # the usual case, decided quickly
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return np.array(values, dtype=bool)
    ints = [int(v) for v in values if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))]
    if len(ints) == len(values) and all(-(2**63) <= v < 2**63 for v in ints):
        return np.array(values, dtype=np.int64)
    # floats alone are float64; integers mixed with floats stay Python ints (object): 2 is not 2.0 to a
    # kernel (#define) or a restriction (range(2)), and integers beyond 2**53 stay exact
    if not ints and all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in values):
        return np.array(values, dtype=np.float64)
    table = np.empty(len(values), dtype=object)
    table[:] = [v.item() if isinstance(v, np.generic) else v for v in values]
    return table


def _strictly_increasing(a: np.ndarray, chunk: int = 1 << 22) -> bool:
    """``a[1:] > a[:-1]`` everywhere, with temporaries of one chunk only."""
    for start in range(0, len(a) - 1, chunk):
        part = a[start:start + chunk + 1]
        if not bool(np.all(part[1:] > part[:-1])):
            return False
    return True


def _is_numeric(table: np.ndarray) -> bool:
    if table.dtype != object:
        return True
    return all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in table.tolist())


def _index_dtype(max_size: int) -> np.dtype:
    return index_dtype(max_size)


def check_params(params: Mapping[str, Sequence[Any]], constants: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`SearchSpaceError` for bad parameters or constants, without enumerating anything.

    For checks that cannot apply the restrictions yet (they read device
    limits): building the unrestricted space instead would enumerate the
    whole Cartesian product.
    """
    SearchSpace.__new__(SearchSpace)._init_params(params, constants)


class SearchSpace:
    """Valid configurations of ``params`` under ``restrictions``.

    ``params`` maps each name to its ordered list of values; ``restrictions``
    is a list of expression strings (see :mod:`.expressions`) and callables
    (see :mod:`.callables`: arguments named after parameters get their values,
    a single other argument gets the configuration dict), or one such
    restriction on its own; ``constants`` are extra names for expressions
    (device limits). Integers are exact, as in Python, at any size.
    The valid set is stored as ``indices`` (n_valid x n_params, smallest
    unsigned dtype) of value indices, sorted lexicographically, so a row number
    identifies a configuration everywhere in the engine.

    A space of more than ``max_configurations`` valid configurations
    (default :data:`~.build.DEFAULT_MAX_CONFIGURATIONS`, sized for a 4 GB
    CI runner) is refused with :class:`~.build.SearchSpaceTooLarge` once the
    count is known, before the index matrix is allocated.
    """

    def __init__(self, params: Mapping[str, Sequence[Any]], restrictions: Iterable[RestrictionLike] | None = None,
                 constants: Mapping[str, Any] | None = None, *, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 max_configurations: int | None = None):
        self._init_params(params, constants)
        self.restrictions: list[RestrictionLike] = as_restriction_list(restrictions)
        compiled: list[Restriction | CallableRestriction] = []
        callables: list[CallableRestriction] = []
        for r in self.restrictions:
            if isinstance(r, str):
                compiled.append(compile_restriction(r, self.names, self.constants))
            elif callable(r):
                wrapped = classify_callable(r, self.names)
                # a callable over named parameters joins the vectorised construction like an expression
                (compiled if wrapped.style == "values" else callables).append(wrapped)
            else:
                raise SearchSpaceError(refused_restriction(r))
        built = build_blocks(self.names, self._tables, compiled, chunk_rows, max_configurations,
                             callables_follow=bool(callables))
        constrained = {q for r in compiled if len(r.names) > 1 for q in r.names}
        self._prunes = [bool(callables) or n in constrained for n in self.names]
        self._finish_blocks(built.blocks)  # consumes the blocks, freeing each once it is in the matrix
        del built
        if callables:  # filter the sorted rows: they stay sorted, so no second sort is needed
            keep = apply_callables(self.names, self._tables, self.indices, callables)
            if not keep.any():
                raise SearchSpaceError("the search space is empty: the callable restrictions rejected every "
                                       f"one of the {int(keep.size)} configurations left by the string restrictions")
            if not keep.all():
                self.indices, self._keys = self.indices[keep], self._keys[keep]
                self._reset_caches()

    # -- construction helpers -----------------------------------------------------
    def _init_params(self, params: Mapping[str, Sequence[Any]], constants: Mapping[str, Any] | None) -> None:
        if not isinstance(params, Mapping) or not params:
            raise SearchSpaceError("params must be a non-empty mapping of parameter name -> list of values")
        for name in params:
            if not isinstance(name, str) or not name.isidentifier():
                raise SearchSpaceError(f"parameter name {name!r} is not a valid identifier")
        self.names: tuple[str, ...] = tuple(params)
        self._tables: list[np.ndarray] = [_value_table(n, v) for n, v in params.items()]
        self.values: dict[str, tuple] = {n: tuple(t.tolist()) for n, t in zip(self.names, self._tables)}
        self.constants: dict[str, Any] = dict(constants or {})
        clash = set(self.constants) & set(self.names)
        if clash:
            raise SearchSpaceError(f"constant(s) {sorted(clash)} have the same name as a parameter")
        self.sizes = np.array([len(t) for t in self._tables], dtype=np.int64)
        # unordered parameters: values that are not all numbers (a loop order, a method name)
        self.categorical = np.array([not _is_numeric(t) for t in self._tables], dtype=bool)
        self.cartesian_size: int = prod(int(s) for s in self.sizes)
        # Mixed-radix keys (first parameter most significant) need the Cartesian size to fit int64;
        # checked before construction, whose int64 row arithmetic would overflow too.
        if self.cartesian_size >= 2**62:
            raise SearchSpaceError(f"Cartesian size {self.cartesian_size} is beyond 2**62; split the space")
        self._value_index: list[dict[Any, int]] = [{(type(v) is str, v): i for i, v in enumerate(vals)}
                                                   for vals in self.values.values()]
        # dict -> tuple of its values in parameter order, in C (find's hot path)
        if len(self.names) > 1:
            self._values_of: Callable[[Mapping[str, Any]], tuple] = operator.itemgetter(*self.names)
        else:
            only = self.names[0]
            self._values_of = lambda config: (config[only],)

    def _finish_blocks(self, blocks: list[dict[str, np.ndarray]]) -> None:
        """Sorted keys and index matrix of the Cartesian product of independent blocks, filled in place.

        Each block is sorted by its share of the key and the blocks are crossed
        most significant first, so the crossed keys come out sorted whenever
        the blocks' parameters do not interleave in the parameter order (the
        common case: free parameters, one constrained group); then every
        column is a repeat/tile pattern, written through a reshaped view of the
        index matrix. Otherwise the crossed keys are sorted in place and the
        indices decoded from them (mixed radix) a chunk at a time. Sorting
        keys in place and decoding, rather than an argsort and gathers, keeps
        the peak near the result itself: 8 bytes of key plus one index per
        parameter in the smallest dtype, per valid configuration. ``blocks``
        is consumed (emptied), so each block's columns are freed once used.
        """
        self._set_mult()
        pos = {n: k for k, n in enumerate(self.names)}
        dtype = _index_dtype(int(self.sizes.max()))
        sizes_of = [len(next(iter(b.values()))) for b in blocks]
        if sum(s > 1 for s in sizes_of) <= 1:
            self._finish_one_block(blocks, pos, dtype)
            return
        prepared = []  # (parameter positions, block columns as (params, rows) in the final dtype, block keys)
        while blocks:
            block = blocks.pop(0)
            ks = [pos[q] for q in block]
            bkeys = np.zeros(len(next(iter(block.values()))), dtype=np.int64)
            self._add_keys(bkeys, block, pos)
            if _strictly_increasing(bkeys):
                cols = np.array(list(block.values()), dtype=dtype)
            else:
                block.clear()
                bkeys.sort()  # keys are distinct: any sort gives the order a stable one would
                cols = np.ascontiguousarray(self._decode(bkeys, dtype, ks).T)
            prepared.append((ks, cols, bkeys))
        # crossing order: most significant varying parameter first (single-row blocks anywhere)
        prepared.sort(key=lambda b: (1, min(b[0])) if len(b[2]) > 1 else (0, 0))
        sizes = [len(b[2]) for b in prepared]
        n = prod(sizes)
        keys = np.zeros(n, dtype=np.int64)
        grid = keys.reshape(sizes)
        for j, (_, _, bkeys) in enumerate(prepared):  # keys of the product, through broadcast views
            shape = [1] * len(sizes)
            shape[j] = sizes[j]
            grid += bkeys.reshape(shape)
        del grid
        if not _strictly_increasing(keys):
            del prepared
            keys.sort()
            self._keys = keys
            self.indices = self._decode(keys, dtype)
        else:
            self._keys = keys
            indices = np.empty((n, len(self.names)), dtype=dtype)
            inner = n
            for (ks, cols, _), size in zip(prepared, sizes):
                inner //= size
                view = indices.reshape(n // (size * inner), size, inner, len(self.names))
                for k, col in zip(ks, cols):  # the block's row of row i: (i // inner) % size
                    view[:, :, :, k] = col[None, :, None]
            self.indices = indices
        self._reset_caches()

    def _finish_one_block(self, blocks: list[dict[str, np.ndarray]], pos: Mapping[str, int], dtype: np.dtype) -> None:
        """At most one block has more than one row: its columns are the space's, no crossing needed."""
        varying = [b for b in blocks if len(next(iter(b.values()))) > 1]
        fixed = [b for b in blocks if len(next(iter(b.values()))) == 1]
        blocks.clear()
        n = len(next(iter(varying[0].values()))) if varying else 1
        indices = np.empty((n, len(self.names)), dtype=dtype)
        offset = 0
        for block in fixed:
            for q, col in block.items():
                indices[:, pos[q]] = col[0]
                offset += int(col[0]) * int(self._mult[pos[q]])
        keys = np.full(n, offset, dtype=np.int64)
        if varying:
            block = varying.pop()
            self._add_keys(keys, block, pos)
            if _strictly_increasing(keys):
                for q in list(block):
                    indices[:, pos[q]] = block.pop(q)
            else:
                ks = [pos[q] for q in block]
                block.clear()
                keys.sort()  # keys are distinct: any sort gives the order a stable one would
                self._decode(keys, dtype, ks, out=indices)
        self._keys = keys
        self.indices = indices
        self._reset_caches()

    def _add_keys(self, keys: np.ndarray, block: Mapping[str, np.ndarray], pos: Mapping[str, int],
                  chunk: int = 1 << 20) -> None:
        """``keys += sum(column * mult)`` over a block's parameters, with temporaries of one chunk."""
        for q, col in block.items():
            k = pos[q]
            if self.sizes[k] == 1:
                continue
            m = self._mult[k]
            for start in range(0, len(keys), chunk):
                keys[start:start + chunk] += col[start:start + chunk].astype(np.int64) * m

    def _decode(self, keys: np.ndarray, dtype: np.dtype, positions: Sequence[int] | None = None,
                out: np.ndarray | None = None, chunk: int = 1 << 20) -> np.ndarray:
        """Value indices of mixed-radix keys (first parameter most significant), a chunk at a time.

        ``positions``: only these parameters, as columns of a (rows x len)
        matrix unless ``out`` (rows x all parameters) is given to fill.
        """
        ks = list(range(len(self.names))) if positions is None else list(positions)
        if out is None:
            out = np.empty((len(keys), len(ks)), dtype=dtype)
            where = list(range(len(ks)))
        else:
            where = ks
        for start in range(0, len(keys), chunk):
            part = keys[start:start + chunk]
            for k, w in zip(ks, where):
                size = int(self.sizes[k])
                out[start:start + chunk, w] = (part // self._mult[k]) % size if size > 1 else 0
        return out

    def _set_mult(self) -> None:
        mult = np.ones(len(self.names), dtype=np.int64)
        for k in range(len(self.names) - 2, -1, -1):
            mult[k] = mult[k + 1] * self.sizes[k + 1]
        self._mult = mult

    def _reset_caches(self) -> None:
        self._present: list[np.ndarray] | None = None
        self._dense_rows: nb.DenseRows | None = None
        self._row_of_tuple: dict[tuple, int] | None = None
        self._hamming: nb.HammingPlan | None = None
        self._adjacent: nb.AdjacentTable | None = None
        self._columns: tuple[np.ndarray, np.ndarray] | None = None  # (varying parameters, their index columns)

    def _finish(self, columns: list[np.ndarray]) -> None:
        self._set_mult()
        n = len(columns[0])
        keys = np.zeros(n, dtype=np.int64)
        for col, m in zip(columns, self._mult):
            keys += col.astype(np.int64, copy=False) * m
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        if n > 1 and np.any(keys[1:] == keys[:-1]):
            dedup = np.concatenate(([True], keys[1:] != keys[:-1]))
            order, keys = order[dedup], keys[dedup]
        self._keys = keys
        dtype = _index_dtype(int(self.sizes.max()))
        columns_t = np.empty((len(self.names), len(keys)), dtype=dtype)
        for k, col in enumerate(columns):
            columns_t[k] = col[order]
        self.indices = np.ascontiguousarray(columns_t.T)
        self._reset_caches()

    @classmethod
    def from_configurations(cls, params: Mapping[str, Sequence[Any]] | None, configurations: Iterable[Config],
                            constants: Mapping[str, Any] | None = None) -> "SearchSpace":
        """A space defined by an explicit list of configurations (e.g. a measured cache file).

        ``params`` fixes the value order; when ``None`` it is inferred from the
        configurations (values sorted, names in first-seen order).
        """
        configs = list(configurations)
        if not configs:
            raise SearchSpaceError("from_configurations needs at least one configuration")
        if params is None:
            if not isinstance(configs[0], Mapping):
                raise SearchSpaceError("params are required when configurations are tuples")
            names = list(configs[0])
            seen: dict[str, set] = {n: set() for n in names}
            for c in configs:
                for n in names:
                    seen[n].add(c[n])
            params = {n: sorted(vals, key=lambda v: (isinstance(v, str), v)) for n, vals in seen.items()}
        self = cls.__new__(cls)
        self._init_params(params, constants)
        self.restrictions = []
        self._prunes = [True] * len(self.names)
        rows = np.array([self.value_indices(c) for c in configs], dtype=np.int64).reshape(len(configs), -1)
        self._finish([rows[:, k] for k in range(len(self.names))])
        return self

    # -- basic protocol -----------------------------------------------------------
    def __len__(self) -> int:
        return len(self._keys)

    @property
    def n_params(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"SearchSpace({len(self)} valid of {self.cartesian_size} over {', '.join(self.names)})"

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for row in range(len(self)):
            yield self.get(row)

    def __contains__(self, config: Config) -> bool:
        return self.find(config) >= 0

    # -- conversions -------------------------------------------------------------
    def value_indices(self, config: Config) -> np.ndarray:
        """Per-parameter value indices of a configuration (dict or tuple of values)."""
        if isinstance(config, Mapping):
            missing = [n for n in self.names if n not in config]
            if missing:
                raise SearchSpaceError(f"configuration lacks parameter(s) {missing}")
            values = [config[n] for n in self.names]
        else:
            values = list(config)
            if len(values) != len(self.names):
                raise SearchSpaceError(f"configuration has {len(values)} values for {len(self.names)} parameters")
        out = np.empty(len(values), dtype=np.int64)
        for k, v in enumerate(values):
            idx = self._value_index[k].get((type(v) is str, v.item() if isinstance(v, np.generic) else v))
            if idx is None:
                raise SearchSpaceError(f"value {v!r} is not among the values of parameter {self.names[k]!r}")
            out[k] = idx
        return out

    def get(self, row: int) -> dict[str, Any]:
        """The configuration at ``row`` as a dict of parameter values."""
        idx = self.indices[int(row)]
        return {n: self.values[n][int(i)] for n, i in zip(self.names, idx)}

    def tuple(self, row: int) -> tuple:
        idx = self.indices[int(row)]
        return tuple(self.values[n][int(i)] for n, i in zip(self.names, idx))

    def dicts(self, rows: Iterable[int]) -> list[dict[str, Any]]:
        return [self.get(r) for r in rows]

    def vector_to_config(self, v: Sequence[int]) -> dict[str, Any]:
        return {n: self.values[n][int(i)] for n, i in zip(self.names, v)}

    # -- membership ----------------------------------------------------------------
    def _tuple_index(self) -> dict[tuple, int]:
        if self._row_of_tuple is None:
            value_cols = [np.asarray(self.values[n], dtype=object)[self.indices[:, k]].tolist()
                          for k, n in enumerate(self.names)]
            self._row_of_tuple = dict(zip(zip(*value_cols), range(len(self))))
        return self._row_of_tuple

    def find(self, config: Config) -> int:
        """Row of a configuration (dict or tuple of values), -1 when it is not valid."""
        if self._row_of_tuple is None and len(self) > TUPLE_INDEX_ROWS:
            return self._find_by_key(config)
        if type(config) is dict:  # the hot path: one C-level gather and one hash lookup
            try:
                return (self._row_of_tuple or self._tuple_index()).get(self._values_of(config), -1)
            except (KeyError, TypeError):
                return -1
        if isinstance(config, tuple):
            try:
                return self._tuple_index().get(config, -1)
            except TypeError:
                return -1
        if isinstance(config, Mapping):
            try:
                return self._tuple_index().get(tuple(config[n] for n in self.names), -1)
            except (KeyError, TypeError):
                return -1
        try:
            v = self.value_indices(config)
        except SearchSpaceError:
            return -1
        return self.find_indices(v)

    def _find_by_key(self, config: Config) -> int:
        """:meth:`find` without the tuple dict: value indices, then a binary search of the sorted keys."""
        if isinstance(config, Mapping):
            if any(n not in config for n in self.names):
                return -1
            config = tuple(config[n] for n in self.names)
        try:
            v = self.value_indices(config)
        except (SearchSpaceError, TypeError):
            return -1
        return self.find_indices(v)

    def find_indices(self, v: Sequence[int]) -> int:
        """Row of a value-index vector, -1 when invalid."""
        v = np.asarray(v, dtype=np.int64)
        if np.any(v < 0) or np.any(v >= self.sizes):
            return -1
        return int(nb.rows_of_keys(self._keys, np.array([int(np.dot(v, self._mult))]), self._dense_rows)[0])

    def rows_of(self, vectors: np.ndarray) -> np.ndarray:
        """Vectorised membership: row per value-index vector (rows of a matrix), -1 where invalid."""
        vectors = np.asarray(vectors, dtype=np.int64).reshape(-1, self.n_params)
        inside = np.all((vectors >= 0) & (vectors < self.sizes), axis=1)
        keys = np.where(inside, vectors @ self._mult, -1)
        return np.where(inside, nb.rows_of_keys(self._keys, np.where(inside, keys, 0), self._dense()), -1)

    # -- sampling -----------------------------------------------------------------
    def sample(self, k: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """``k`` distinct valid rows drawn uniformly (all rows when ``k >= len``)."""
        rng = np.random.default_rng(rng)
        k = min(int(k), len(self))
        return rng.choice(len(self), size=k, replace=False)

    def lhs_sample(self, k: int, rng: np.random.Generator | int | None = None, maximin: bool = True,
                   candidates: int = 10) -> np.ndarray:
        """Latin-hypercube sample of ``k`` distinct valid rows.

        Each dimension of [0,1]^d is cut into ``k`` strata, one point per
        stratum; every value of a parameter owns an equal share of [0,1]
        (:meth:`bin_indices`), so each value is drawn equally often, end
        values included; points snap to the nearest valid configuration
        (duplicates replaced by random unsampled rows). With ``maximin`` the
        best of ``candidates`` designs by smallest pairwise distance is kept.
        """
        rng = np.random.default_rng(rng)
        k = min(int(k), len(self))
        if k <= 0:
            return np.empty(0, dtype=np.int64)
        best, best_score = None, -1.0
        for _ in range(candidates if maximin else 1):
            strata = np.stack([rng.permutation(k) for _ in range(self.n_params)], axis=1)
            points = (strata + rng.random((k, self.n_params))) / k
            rows = self._distinct(self._snap(self.bin_indices(points), rng), k, rng)
            if not maximin:
                return rows
            x = self.encode(rows)
            d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
            score = d[np.triu_indices(k, 1)].min() if k > 1 else 0.0
            if score > best_score:
                best, best_score = rows, score
        return best  # type: ignore[return-value]

    def _distinct(self, rows: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
        _, first = np.unique(rows, return_index=True)
        rows = rows[np.sort(first)]
        while len(rows) < k:
            extra = self.sample(k - len(rows) + 4, rng)
            extra = extra[~np.isin(extra, rows)]
            rows = np.concatenate([rows, extra[: k - len(rows)]])
        return rows

    # -- neighbours and repair -------------------------------------------------------
    def _vector(self, config: int | np.integer | Sequence[int] | Mapping[str, Any]) -> np.ndarray:
        """Row number -> its index vector; a value-index vector passes through; a dict converts."""
        if isinstance(config, (int, np.integer)):
            return self.indices[int(config)].astype(np.int64)
        if isinstance(config, Mapping):
            return self.value_indices(config)
        return np.asarray(config, dtype=np.int64)

    def _dense(self) -> nb.DenseRows | None:
        """Lazily built key -> row table; only for Cartesian sizes up to :data:`~.neighbours.DENSE_LIMIT`."""
        if self._dense_rows is None and self.cartesian_size <= nb.DENSE_LIMIT:
            self._dense_rows = nb.DenseRows(self._keys, self.cartesian_size)
        return self._dense_rows

    def present_values(self) -> list[np.ndarray]:
        """Per parameter, the sorted value indices that occur in some valid configuration."""
        if self._present is None:
            self._present = [np.flatnonzero(np.bincount(self.indices[:, k], minlength=int(m)))
                             for k, m in enumerate(self.sizes)]
        return self._present

    def neighbours(self, config: int | Sequence[int] | Mapping[str, Any], method: str = "hamming") -> np.ndarray:
        """Valid neighbour rows of a row, a value-index vector (valid or not) or a dict.

        ``strictly-adjacent``: every parameter the same or the previous/next
        value; ``adjacent``: every parameter the same or the nearest lower/higher
        value used by any valid configuration; ``hamming``: exactly one parameter
        differs; ``index-distance``: the valid configurations at the smallest
        sum of absolute index differences. The configuration itself is excluded.
        """
        if isinstance(config, (int, np.integer)):  # a row: its vector and key are at hand
            self_row = int(config)
            v = self.indices[self_row].astype(np.int64)
            key = int(self._keys[self_row])
        else:
            v = self._vector(config)
            self_row, key = None, None
        if method == "hamming":
            if self._hamming is None:
                self._hamming = nb.HammingPlan(self.sizes, self._mult)
            key = int(np.dot(v, self._mult)) if key is None else key
            return self._hamming.rows(self._keys, key, v, self._dense())
        if method == "index-distance":
            return np.sort(nb.nearest_by_index_distance(self._keys, self._mult, self.sizes, self.indices, v,
                                                        dense=self._dense(), prunes=self._prunes))
        if method == "strictly-adjacent":
            lo, hi = np.maximum(v - 1, 0), np.minimum(v + 1, self.sizes - 1)
        elif method == "adjacent":
            if self._adjacent is None:
                self._adjacent = nb.AdjacentTable(self.present_values(), self.sizes)
            lo, hi = self._adjacent.bounds(v)
        else:
            raise SearchSpaceError(f"unknown neighbour method {method!r}; choose from {', '.join(NEIGHBOUR_METHODS)}")
        # The neighbours are the valid rows inside the box [lo, hi]: between the box's ends and the
        # configuration's own value no valid row uses any value.
        cells = len(self) * self.n_params
        if cells <= nb.SCAN_LIMIT or (cells <= nb.SCAN_LIMIT_SPARSE and self._dense() is None):
            # small, or sparse (no dense key table, every walk probe a binary search): one pass over the columns
            rows = self._box_scan(lo, hi)
        else:
            choices = (nb.strictly_adjacent_choices(self.sizes, v) if method == "strictly-adjacent"
                       else self._adjacent.choices(v))  # type: ignore[union-attr]
            rows, _ = nb.box_walk(self._keys, self._mult, choices, dense=self._dense(), prunes=self._prunes)
            if rows is None:  # the walk's frontier grew too wide: one scan instead
                rows = self._box_scan(lo, hi)
        if self_row is None:
            self_row = self.find_indices(v)
        return rows[rows != self_row] if self_row >= 0 else rows

    def _box_scan(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Rows with ``lo <= index <= hi`` in every parameter, by one vectorised pass over the columns."""
        if self._columns is None:
            varying = np.flatnonzero(self.sizes > 1)
            self._columns = (varying, np.ascontiguousarray(self.indices[:, varying].T))
        varying, cols = self._columns
        if len(varying) == 0:
            return np.arange(len(self))
        lo, hi = lo[varying], hi[varying]
        if cols.dtype.kind == "u":  # lo <= col <= hi as one unsigned comparison: col - lo wraps below lo
            inside = np.less_equal(cols - lo.astype(cols.dtype)[:, None], (hi - lo).astype(cols.dtype)[:, None])
        else:  # pragma: no cover - int64 indices need more than 2**32 values of one parameter
            inside = (cols >= lo[:, None]) & (cols <= hi[:, None])
        return np.flatnonzero(inside.all(axis=0) if len(varying) > 1 else inside[0])

    def nearest(self, vector: Sequence[int], rng: np.random.Generator | int | None = None) -> int:
        """The valid row closest to a value-index vector by index distance (itself when valid)."""
        v = np.asarray(vector, dtype=np.int64)
        v = np.clip(v, 0, self.sizes - 1)
        row = self.find_indices(v)
        if row >= 0:
            return row
        rows = nb.nearest_by_index_distance(self._keys, self._mult, self.sizes, self.indices, v, dense=self._dense(),
                                            prunes=self._prunes)
        return int(np.random.default_rng(rng).choice(rows))

    def repair(self, vector: Sequence[int], rng: np.random.Generator | int | None = None,
               methods: Sequence[str] = ("strictly-adjacent", "adjacent", "hamming")) -> int:
        """A valid row for a possibly invalid value-index vector.

        Valid vectors map to themselves. Otherwise a random valid neighbour by
        the first method in ``methods`` that has one (the constraint-aware
        evolutionary algorithms' repair); failing all, the nearest by index distance.
        """
        rng = np.random.default_rng(rng)
        v = np.clip(np.asarray(vector, dtype=np.int64), 0, self.sizes - 1)
        row = self.find_indices(v)
        if row >= 0:
            return row
        for method in methods:
            rows = self.neighbours(v, method)
            if len(rows):
                return int(rng.choice(rows))
        return self.nearest(v, rng)

    # -- continuous encoding --------------------------------------------------------
    def encode(self, rows: Iterable[int] | np.ndarray | None = None) -> np.ndarray:
        """Configurations as points in [0,1]^d: value index / (number of values - 1) per parameter.

        Parameters with a single value encode as 0.5.
        """
        idx = self.indices if rows is None else self.indices[np.asarray(rows, dtype=np.int64)]
        span = np.maximum(self.sizes - 1, 1).astype(np.float64)
        x = idx.astype(np.float64) / span
        x[:, self.sizes == 1] = 0.5
        return x

    def decode(self, points: np.ndarray, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """Rows for points of [0,1]^d: round to the nearest value indices, then the nearest valid row."""
        points = np.clip(np.atleast_2d(np.asarray(points, dtype=np.float64)), 0.0, 1.0)
        return self._snap(np.rint(points * (self.sizes - 1)).astype(np.int64), rng)

    def bin_indices(self, points: np.ndarray) -> np.ndarray:
        """Value indices for points of [0,1]^d where every value owns an equal share of [0,1].

        Sampling designs (Latin hypercube) use this instead of :meth:`decode`'s
        rounding, which gives the first and last value half the share of the
        others and so under-samples end values (often where the optimum is:
        the largest tile, the smallest block).
        """
        points = np.clip(np.atleast_2d(np.asarray(points, dtype=np.float64)), 0.0, 1.0)
        return np.minimum((points * self.sizes).astype(np.int64), self.sizes - 1)

    def _snap(self, v: np.ndarray, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """Rows of value-index vectors, the nearest valid row where one is not in the space."""
        rng = np.random.default_rng(rng)
        rows = self.rows_of(v)
        for i in np.flatnonzero(rows < 0):
            rows[i] = self.nearest(v[i], rng)
        return rows
