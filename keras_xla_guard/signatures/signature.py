"""`Signature`: the concrete input signature of one call of a compiled step.

XLA compiles one executable per concrete input signature (structure, shapes,
dtypes). This module is pure Python (no TensorFlow, no Keras): it turns nested
structures of arrays, tensors or specs into `Signature`s and compares them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FUNCTION_STATIC",
    "PYTREE_STATIC",
    "WEAK",
    "Signature",
    "closest",
    "differences",
    "flatten_leaves",
    "input_name",
    "only_batch_shrunk",
]

# The `statics` entry naming which function object ran when it is not the first of its code
# (a JAX step made anew keys new programs): `("function", "train_step object 2")`.
FUNCTION_STATIC = "function"
# The `statics` entry naming a pytree structure with the same leaves as an earlier one but other
# static parts (a custom node's aux data), when it is not the first: `("pytree", "opt structure 2")`.
PYTREE_STATIC = "pytree"
# The prefix of a weakly typed leaf's dtype name (`"weak float32"`), as JAX's avals print `~float32`.
WEAK = "weak "

Shape = tuple[int | None, ...] | None
# A path step: a position, a string key or field name, or any other dict key tagged with its type.
PathKey = str | int | tuple[type, Any]


_MISSING = object()
_Leaf = tuple[tuple[PathKey, ...], Any, Any, Any]


def _flatten(structure: Any) -> list[_Leaf]:
    """Returns `(path, leaf, shape, dtype)` per leaf, in `tf.nest` order (dict keys sorted).

    A leaf is anything with a `shape` and a `dtype`.
    """
    out: list[_Leaf] = []
    _walk(structure, (), out)
    return out


def _mapping_key(key: Any) -> tuple[PathKey]:
    """A dict key as a path holds it: a string as is, any other key tagged with its type.

    Positions are plain ints. Tagged, `{1.0: a}` and `{True: a}` keep paths
    apart from `{1: a}` (equal keys, shown differently) in `_RENDERED`.
    """
    return (key,) if type(key) is str else ((type(key), key),)


def _walk(structure: Any, path: tuple[PathKey, ...], out: list[_Leaf]) -> None:
    # A plain recursion filling one list, each leaf's `shape` and `dtype`
    # read once: every watched step pays for this walk, and a generator
    # chain or a second read of a tensor's properties costs microseconds.
    # Plain dicts, lists and tuples first: they have no `shape` to look for.
    kind = type(structure)
    if kind is dict:
        for key in sorted(structure):
            _walk(structure[key], path + _mapping_key(key), out)
        return
    if kind is tuple or kind is list:
        for i, item in enumerate(structure):
            _walk(item, path + (i,), out)
        return
    if structure is None:
        return
    shape = getattr(structure, "shape", _MISSING)
    if shape is not _MISSING:
        dtype = getattr(structure, "dtype", _MISSING)
        if dtype is not _MISSING:
            out.append((path, structure, shape, dtype))
            return
    if isinstance(structure, Mapping):
        for key in sorted(structure):
            _walk(structure[key], path + _mapping_key(key), out)
    elif isinstance(structure, tuple) and hasattr(structure, "_fields"):
        for name in structure._fields:
            _walk(getattr(structure, name), path + (name,), out)
    elif isinstance(structure, (list, tuple)):
        for i, item in enumerate(structure):
            _walk(item, path + (i,), out)


def flatten_leaves(structure: Any) -> list[Any]:
    """Returns the array-like leaves of `structure` in `Signature` order.

    Args:
        structure: A nested dict/list/tuple/namedtuple of arrays, tensors or
            specs (anything with `shape` and `dtype`); `None` is skipped.

    Returns:
        The leaves, in the order `Signature.of` lists them.
    """
    return [leaf for _, leaf, _, _ in _flatten(structure)]


# Rendered paths by (paths, root names, whether the top is a sequence): the
# structure of a step's inputs rarely changes, their rendering is per leaf.
# Bounded, in case the keys of some input change every step.
_RENDERED: dict[tuple[Any, ...], tuple[str, ...]] = {}
_RENDERED_MAX = 256


def _rendered_paths(
    paths: tuple[tuple[PathKey, ...], ...], root_names: Sequence[str] | None, top_is_seq: bool
) -> tuple[str, ...]:
    """The display paths of a structure's leaves (`_render_path` of each), cached."""
    key = (paths, None if root_names is None else tuple(root_names), top_is_seq)
    rendered = _RENDERED.get(key)
    if rendered is None:
        if len(_RENDERED) >= _RENDERED_MAX:
            _RENDERED.clear()
        rendered = _RENDERED[key] = tuple([_render_path(path, root_names, top_is_seq) for path in paths])
    return rendered


def _render_path(path: tuple[PathKey, ...], root_names: Sequence[str] | None, top_is_seq: bool) -> str:
    if not path:
        return root_names[0] if root_names else "input"
    parts: list[str] = []
    rest = path
    if root_names and top_is_seq and isinstance(path[0], int) and path[0] < len(root_names):
        parts.append(root_names[path[0]])
        rest = path[1:]
    for key in rest:
        if isinstance(key, tuple):
            key = key[1]
        parts.append(f"[{key}]" if isinstance(key, int) else f"[{key!r}]")
    return "".join(parts)


def _shape_of(shape: Any) -> Shape:
    if type(shape) is not tuple:
        if getattr(shape, "rank", 0) is None:
            return None
        # A `tf.TensorShape` lists its dims in one call; iterating it runs
        # a generator, several times slower on every watched step.
        as_list = getattr(shape, "as_list", None)
        if as_list is not None:
            shape = as_list()
    dims: list[int | None] = []
    for d in shape:
        # Plain ints (NumPy, TF 2 and Keras shapes) as they are; TF 1
        # `Dimension`s and NumPy integers by value.
        if type(d) is not int:
            d = getattr(d, "value", d)
            if d is not None:
                d = int(d)
        dims.append(d)
    return tuple(dims)


# Dtype names by the dtype object's id. Each entry holds the object, so
# no other object can have that id while the entry lives. A tensor's
# `dtype.name` costs about a microsecond, and a step reads the same few
# dtype objects every time. Bounded, for dtypes made anew on every read.
_DTYPE_NAMES: dict[int, tuple[Any, str]] = {}
_DTYPE_NAMES_MAX = 64


def _dtype_name(dtype: Any) -> str:
    known = _DTYPE_NAMES.get(id(dtype))
    if known is not None:
        return known[1]
    name = str(getattr(dtype, "name", dtype))
    if len(_DTYPE_NAMES) < _DTYPE_NAMES_MAX:
        _DTYPE_NAMES[id(dtype)] = (dtype, name)
    return name


def _dim(d: int | None) -> str:
    """A dimension as shapes show it: `?` when unknown."""
    return "?" if d is None else str(d)


def _format_shape(dtype: str, shape: Shape) -> str:
    if shape is None:
        return f"{dtype}[?]"
    return f"{dtype}[{','.join(_dim(d) for d in shape)}]"


@dataclass(frozen=True)
class Signature:
    """The concrete input signature of one call: structure, shapes, dtypes.

    Two calls with equal signatures reuse one XLA executable; a new signature
    means a new compilation when the step is compiled with XLA. Dimensions
    that are unknown (a spec's `None`, or an input the adapter cannot see)
    are `None` and compare equal.

    Attributes:
        paths: One display path per array leaf, e.g. `"x['tokens']"`, `"y"`,
            `"[0][1]"`.
        shapes: The leaves' shapes (tuples of ints or `None`); `None` for
            unknown rank.
        dtypes: The leaves' dtype names, e.g. `"int32"`; `"weak float32"`
            for a JAX weakly typed value (a Python scalar).
        statics: What else keys the compiled program besides the arrays,
            as `(name, value)` pairs: a JAX step's static arguments
            (`static_argnums`/`static_argnames`, by `repr`) and
            `("function", ...)`, which function object ran. Empty for
            Keras steps and TensorFlow functions.

    Example:

    ```python
    import numpy as np
    from keras_xla_guard.signatures import Signature

    sig = Signature.of(({"tokens": np.zeros((8, 5), "int32")}, np.zeros((8, 1))),
                       root_names=("x", "y"))
    print(sig)  # x['tokens']: int32[8,5], y: float64[8,1]
    ```
    """

    paths: tuple[str, ...]
    shapes: tuple[Shape, ...]
    dtypes: tuple[str, ...]
    statics: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # Hashed once: a watched step looks its signature up several times
        # (the run's and the epoch's counts), each hash a walk of three
        # nested tuples.
        object.__setattr__(self, "_hash", hash((self.paths, self.shapes, self.dtypes, self.statics)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt through `__init__`, so an unpickled copy never carries a
        # hash of another process (string hashes differ between processes).
        return (type(self), (self.paths, self.shapes, self.dtypes, self.statics))

    @classmethod
    def of(cls, structure: Any, *, root_names: Sequence[str] | None = None) -> Signature:
        """Builds the signature of a nested structure of arrays or tensors.

        Args:
            structure: Dicts (keys sorted, as `tf.nest` does), lists, tuples
                and namedtuples of objects with `shape` and `dtype` (NumPy
                arrays, `tf.Tensor`, `tf.TensorSpec`, Keras tensors). `None`
                entries are skipped.
            root_names: Names for the positions of a top-level tuple or list,
                e.g. `("x", "y", "sample_weight")` for Keras' `(x, y, sw)`;
                also the name of a bare top-level array. Defaults to `None`
                (positions shown as `[0]`, `[1]`, a bare array as `input`).

        Returns:
            The signature.

        Raises:
            ValueError: If `root_names` is a string instead of a sequence.
        """
        if isinstance(root_names, str):
            raise ValueError(
                f"`root_names` must be a sequence of names, not a string. Received: root_names={root_names!r}"
            )
        top_is_seq = isinstance(structure, (list, tuple)) and not hasattr(structure, "_fields")
        leaves = _flatten(structure)
        return cls(
            _rendered_paths(tuple([leaf[0] for leaf in leaves]), root_names, top_is_seq),
            tuple([_shape_of(leaf[2]) for leaf in leaves]),
            tuple([_dtype_name(leaf[3]) for leaf in leaves]),
        )

    @property
    def structure(self) -> tuple[Any, ...]:
        """Paths, dtypes, ranks and statics: what must match for a dim-by-dim comparison."""
        leaves = tuple(
            (p, d, None if s is None else len(s)) for p, d, s in zip(self.paths, self.dtypes, self.shapes)
        )
        return leaves + self.statics if self.statics else leaves

    def dynamic_dims(self) -> tuple[tuple[int, int], ...]:
        """`(leaf index, dim)` of every unknown (`None`) dimension of known rank."""
        return tuple(
            (i, d)
            for i, shape in enumerate(self.shapes)
            if shape is not None
            for d, size in enumerate(shape)
            if size is None
        )

    def with_dims(self, dims: Sequence[tuple[int, int]], values: Sequence[int]) -> Signature:
        """Returns a copy with the given unknown dimensions filled in.

        Args:
            dims: `(leaf index, dim)` pairs, as from `dynamic_dims()`.
            values: One size per pair.

        Returns:
            The concrete signature.

        Raises:
            ValueError: If `dims` and `values` differ in length, or a pair
                names a leaf of unknown rank.
        """
        if len(dims) != len(values):
            raise ValueError(
                f"`values` must have one entry per dim ({len(dims)}). Received: values={tuple(values)!r}"
            )
        shapes = [list(s) if s is not None else None for s in self.shapes]
        for (leaf, dim), value in zip(dims, values):
            shape = shapes[leaf]
            if shape is None:
                raise ValueError(
                    f"Leaf {leaf} has no known rank, so none of its dims can be set. Received: dims={tuple(dims)!r}"
                )
            shape[dim] = int(value)
        return dataclasses.replace(self, shapes=tuple(None if s is None else tuple(s) for s in shapes))

    def describe_leaf(self, index: int) -> str:
        """`"<path>: <dtype>[<dims>]"` for one leaf."""
        return f"{self.paths[index]}: {_format_shape(self.dtypes[index], self.shapes[index])}"

    def __str__(self) -> str:
        parts = [self.describe_leaf(i) for i in range(len(self.paths))]
        parts += [f"{name}={value}" for name, value in self.statics]
        return ", ".join(parts) or "(no arrays)"

    def to_dict(self) -> dict[str, Any]:
        """Returns the signature as a JSON-serializable dict (`statics` only when there are some)."""
        out: dict[str, Any] = {
            "paths": list(self.paths),
            "shapes": [None if s is None else list(s) for s in self.shapes],
            "dtypes": list(self.dtypes),
        }
        if self.statics:
            out["statics"] = [list(pair) for pair in self.statics]
        return out


def input_name(sig: Signature, index: int) -> str:
    """How messages name a leaf: its dict key when unique, else its path."""
    path = sig.paths[index]
    if path.endswith("']"):
        key = path[path.rfind("['") + 2 : -2]
        if sum(p.endswith(f"['{key}']") for p in sig.paths) == 1:
            return f"input '{key}'"
    # A bare array's path is `input` itself.
    return "the input" if path == "input" else f"input {path}"


def differences(new: Signature, old: Signature) -> list[str]:
    """What differs between two signatures, one line per input, static or dimension.

    Names the pytree keys added or removed, a dtype that changed (a weak
    type: a Python scalar against a typed array), a rank, a static
    argument's value, a function object created again, and each differing
    dimension of equal-structured inputs.
    """
    out = _static_differences(new, old)
    old_leaves = {p: i for i, p in enumerate(old.paths)}
    new_paths = set(new.paths)
    added = [p for p in new.paths if p not in old_leaves]
    removed = [p for p in old.paths if p not in new_paths]
    if added or removed:
        change = "; ".join(
            f"input(s) {verb} the structure: {', '.join(paths)}"
            for verb, paths in (("added to", added), ("removed from", removed))
            if paths
        )
        out.append(f"{change} (pass the same keys every call, e.g. create all state before the first step)")
    for i, path in enumerate(new.paths):
        j = old_leaves.get(path)
        if j is None:
            continue
        a, b = new.shapes[i], old.shapes[j]
        da, db = new.dtypes[i], old.dtypes[j]
        if da != db:
            out.append(f"{path}: dtype {db} -> {da}{_weak_note(da, db)}")
        if a is None or b is None or a == b:
            continue
        if len(a) != len(b):
            out.append(
                f"{path}: rank {len(b)} -> {len(a)} ({_format_shape(db, b)} -> {_format_shape(da, a)})"
            )
            continue
        dims = [f"dim {d}: {_dim(y)} -> {_dim(x)}" for d, (x, y) in enumerate(zip(a, b)) if x != y]
        out.append(f"{path}: {_format_shape(da, a)} vs {_format_shape(db, b)} ({', '.join(dims)})")
    return out


def _weak_note(new: str, old: str) -> str:
    if new.startswith(WEAK) == old.startswith(WEAK):
        return ""
    return (
        " (weak type: a Python scalar is weakly typed, a NumPy or JAX scalar is not; pass the "
        "same kind every call)"
    )


def _static_differences(new: Signature, old: Signature) -> list[str]:
    old_statics = dict(old.statics)
    out = []
    for name, value in new.statics:
        before = old_statics.get(name)
        if name == FUNCTION_STATIC and before != value:
            # The first object of a code carries no tag (backend/jax_steps.py).
            first = f"{value.rsplit(' object ', 1)[0]} object 1"
            out.append(
                f"the step is a new function object ({before or first} -> {value}): each new "
                "function object compiles anew; create the jitted step once, outside the loop"
            )
        elif name == PYTREE_STATIC and before != value:
            first = f"{value.rsplit(' structure ', 1)[0]} structure 1"
            out.append(
                f"the same arrays in another pytree structure ({before or first} -> {value}): its static "
                "parts differ, e.g. a module or optimizer created again whose static fields compare by "
                "identity; create it once, outside the loop"
            )
        elif before is not None and before != value and name != FUNCTION_STATIC:
            out.append(
                f"static argument {name}: {before} -> {value} (each value of a static argument compiles "
                "once; pass a value that varies as an array argument)"
            )
    return out


def only_batch_shrunk(short: Signature, full: Signature) -> bool:
    """Whether `short` equals `full` except for a smaller dimension 0."""
    if short.structure != full.structure:
        return False
    shrunk = False
    for a, b in zip(short.shapes, full.shapes):
        if a is None or b is None or not a:
            continue
        if a[1:] != b[1:] or a[0] is None or b[0] is None or a[0] > b[0]:
            return False
        shrunk = shrunk or a[0] < b[0]
    return shrunk


def _distance(a: Signature, b: Signature) -> int:
    """How far apart two signatures are: other inputs first, then dtypes and ranks, then dims and statics."""
    if a.paths != b.paths:
        # Another structure: the one sharing the most inputs is closest.
        return (1 << 20) + len(set(a.paths) ^ set(b.paths))
    far = sum(x != y for x, y in zip(a.dtypes, b.dtypes)) << 10
    dims = 0
    for sa, sb in zip(a.shapes, b.shapes):
        if sa is None or sb is None:
            continue
        if len(sa) != len(sb):
            far += 1 << 10
            continue
        dims += sum(x != y for x, y in zip(sa, sb) if x is not None and y is not None)
    statics = len(set(a.statics) ^ set(b.statics))
    return far + dims + statics


def closest(signature: Signature, earlier: Sequence[Signature]) -> Signature | None:
    """The earlier signature with the fewest differing dimensions.

    Args:
        signature: The new signature.
        earlier: Signatures seen before, oldest first.

    Returns:
        The closest one (the most recent among equally close ones), or
        `None` if `earlier` is empty.
    """
    best: Signature | None = None
    best_d = None
    for sig in earlier:
        d = _distance(signature, sig)
        if best_d is None or d <= best_d:
            best, best_d = sig, d
    return best
