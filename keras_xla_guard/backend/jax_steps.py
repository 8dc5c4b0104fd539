"""A JAX custom loop's step as `XlaGuard.watch` sees it: the key of each compiled program.

`jax.jit` compiles one program per distinct call key: the pytree structure
of the array arguments, each leaf's shape, dtype and weak type, the values
of the static arguments, and the function object it wraps. `step_probe`
reads that key from each call into a `Signature`, so a recompilation is
explained by what changed: a dimension, a dtype or weak type (a Python
`1.0` is weakly typed, `np.float32(1.0)` is not), a pytree key, a static
argument's value, or a function created anew (a closure or module rebuilt
every epoch, google/flax#5548). JAX is imported when a probe is made, never
when this module is imported.
"""

from __future__ import annotations

import itertools
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from keras_xla_guard.backend._base import StepProbe
from keras_xla_guard.errors import XlaGuardWarning
from keras_xla_guard.seam import jax_internals
from keras_xla_guard.signatures.signature import FUNCTION_STATIC, PYTREE_STATIC, WEAK, Signature

__all__ = ["step_probe"]

# Longest static-argument value shown: a repr can be a whole config.
_MAX_STATIC_CHARS = 80
# Rendered leaf paths per pytree structure: the structure of a step's
# arguments rarely changes, and rendering costs far more than a lookup.
_PATHS_MAX = 256

_objects_lock = threading.Lock()
# Which function object of the same code each one is (1, 2, ...), weakly: a
# step rebuilt each epoch is a new object of the same code, and compiles anew.
_ordinals: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_counters: dict[Any, itertools.count[int]] = {}
_statics_warned = False


def _code_of(fn: Any) -> Any:
    """What identifies `fn`'s source: its code object, through `functools.partial`s."""
    while hasattr(fn, "func") and not hasattr(fn, "__code__"):
        fn = fn.func
    return getattr(fn, "__code__", None) or (type(fn), getattr(fn, "__qualname__", repr(type(fn))))


def _object_tag(fn: Any) -> str | None:
    """`"train_step object 2"`: the name of `fn`, and which object of its code it is (`None`: the first)."""
    name = getattr(fn, "__qualname__", None) or getattr(getattr(fn, "func", None), "__qualname__", None)
    name = name or type(fn).__name__
    try:
        with _objects_lock:
            ordinal = _ordinals.get(fn)
            if ordinal is None:
                counter = _counters.setdefault(_code_of(fn), itertools.count(1))
                ordinal = _ordinals[fn] = next(counter)
    except TypeError:
        # Not weakly referenceable: identity unknown, never a false "new object".
        return None
    # The first object of its code is the usual case: signatures name only later ones.
    return f"{name} object {ordinal}" if ordinal > 1 else None


def _render(path: Sequence[Any], names: Sequence[str], keystr: Callable[[Any], str]) -> str:
    """`x['tokens']` for JAX's key path `(SequenceKey(0), DictKey('tokens'))` of a call's arguments."""
    head, rest = path[0], tuple(path[1:])
    index = getattr(head, "idx", None)
    key = getattr(head, "key", None)
    root = (
        names[index]
        if isinstance(index, int) and index < len(names)
        else str(key if key is not None else head)
    )
    return root + (keystr(rest) if rest else "")


class _CallReader:
    """Reads one call's `Signature` as `jax.jit` keys it (see the module docstring)."""

    def __init__(self, fn: Any, names: tuple[str, ...]) -> None:
        import jax
        import numpy as np

        self._jax = jax
        statics = jax_internals.jit_statics(fn)
        nums, static_names, wrapped = statics if statics is not None else ((), (), fn)
        self._static_nums = frozenset(nums)
        self._static_names = frozenset(static_names)
        self._names = tuple(names)
        self._arg_names_by_count: dict[int, tuple[str, ...]] = {}
        tag = _object_tag(wrapped)
        self._function = ((FUNCTION_STATIC, tag),) if tag is not None else ()
        # Per (structure, argument names): the leaves' paths and the `pytree` static, if any.
        self._paths: dict[Any, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {}
        # Per leaf paths: each distinct structure seen with them, and its arguments' structures.
        self._structures: dict[tuple[str, ...], list[tuple[Any, tuple[Any, ...]]]] = {}
        self._dtypes: dict[int, tuple[Any, str]] = {}
        self._weak_types: dict[type, bool] = {}
        canonical = jax.dtypes.canonicalize_dtype
        # Python scalars are weakly typed, at JAX's default width (float32 unless x64 is on).
        self._scalars = {
            bool: "bool",
            int: WEAK + str(canonical(np.int64)),
            float: WEAK + str(canonical(np.float64)),
            complex: WEAK + str(canonical(np.complex128)),
        }
        self._canonical = canonical

    def _arg_names(self, count: int) -> tuple[str, ...]:
        names = self._arg_names_by_count.get(count)
        if names is None:
            names = self._names[:count] + tuple(f"args[{i}]" for i in range(len(self._names), count))
            self._arg_names_by_count[count] = names
        return names

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Signature:
        names = self._arg_names(len(args))
        statics: list[tuple[str, str]] = []
        if not kwargs and not self._static_nums:
            # The usual call: positional arrays only, nothing static; no per-argument work.
            values: Any = args
            value_names: tuple[str, ...] = names
        else:
            values = []
            split_names: list[str] = []
            for i, value in enumerate(args):
                self._split(names[i], value, i in self._static_nums, values, split_names, statics)
            for name in sorted(kwargs):
                self._split(name, kwargs[name], name in self._static_names, values, split_names, statics)
            value_names = tuple(split_names)
        leaves, treedef = self._jax.tree_util.tree_flatten(values)
        key = (treedef, value_names)
        known = self._paths.get(key)
        if known is None:
            known = self._paths_of(values, value_names, key)
        paths, structure = known
        leaf = self._leaf
        pairs = [leaf(x) for x in leaves]
        return Signature(
            paths,
            tuple([pair[0] for pair in pairs]),
            tuple([pair[1] for pair in pairs]),
            tuple(statics) + structure + self._function if statics or structure else self._function,
        )

    def _split(
        self,
        name: str,
        value: Any,
        static: bool,
        values: list[Any],
        value_names: list[str],
        statics: list[tuple[str, str]],
    ) -> None:
        if static:
            shown = repr(value)
            if len(shown) > _MAX_STATIC_CHARS:
                shown = shown[: _MAX_STATIC_CHARS - 3] + "..."
            statics.append((name, shown))
        else:
            values.append(value)
            value_names.append(name)

    def _paths_of(
        self, values: Any, value_names: Sequence[str], key: Any
    ) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        """The leaves' paths of a structure seen first now, and its `pytree` static.

        Two structures with the same leaves can still differ in their static
        parts (a custom node's aux data: a Flax NNX optimizer made anew holds
        new optax functions), and `jax.jit` compiles each anew: the second
        and later such structures are named in `statics`, with the arguments
        whose own structure differs from the first one's.
        """
        tree = self._jax.tree_util
        with_path, treedef = tree.tree_flatten_with_path(values)
        paths = tuple(_render(path, value_names, tree.keystr) for path, _ in with_path)
        if len(self._paths) >= _PATHS_MAX:
            self._paths.clear()
            self._structures.clear()
        seen = self._structures.setdefault(paths, [])
        ordinal = next((i for i, (known, _) in enumerate(seen, 1) if known == treedef), None)
        per_argument = tuple(tree.tree_structure(value) for value in values)
        if ordinal is None:
            seen.append((treedef, per_argument))
            ordinal = len(seen)
        structure: tuple[tuple[str, str], ...] = ()
        if ordinal > 1:
            first = seen[0][1]
            changed = [name for name, a, b in zip(value_names, per_argument, first) if a != b]
            structure = ((PYTREE_STATIC, f"{', '.join(changed) or 'the arguments'} structure {ordinal}"),)
        self._paths[key] = (paths, structure)
        return paths, structure

    def _leaf(self, leaf: Any) -> tuple[tuple[int | None, ...] | None, str]:
        kind = type(leaf)
        scalar = self._scalars.get(kind)
        if scalar is not None:
            return (), scalar
        try:
            dtype = leaf.dtype
            shape = leaf.shape
        except AttributeError:
            # JAX refuses such an argument itself; the type is what the user sees.
            return None, kind.__name__
        known = self._dtypes.get(id(dtype))
        if known is None:
            known = (dtype, str(self._canonical(dtype)))
            if len(self._dtypes) < 64:
                self._dtypes[id(dtype)] = known
        # Only JAX's arrays have a weak type; whether a type has one is asked once.
        weak = self._weak_types.get(kind)
        if weak is None:
            weak = self._weak_types[kind] = hasattr(leaf, "weak_type")
        name = WEAK + known[1] if weak and leaf.weak_type else known[1]
        return shape if type(shape) is tuple else tuple(shape), name


def step_probe(fn: Callable[..., Any], names: tuple[str, ...]) -> StepProbe:
    """The `StepProbe` of a JAX custom loop's step (see the module docstring).

    Args:
        fn: A `jax.jit` function, an `nnx.jit` one, or any callable that
            calls jitted code.
        names: `fn`'s positional parameter names.

    Returns:
        The probe: every JAX step runs through XLA (`jit_compile=True`);
        `executables` is the jit cache size of a `jax.jit` function, `None`
        for other callables.
    """
    jitted = jax_internals.looks_jitted(fn)
    global _statics_warned
    # Only JAX's own jit function is expected to carry `_jit_info` (not e.g. `nnx.jit`'s wrapper).
    own = type(fn).__module__.split(".", 1)[0] in ("jax", "jaxlib")
    if own and jitted and jax_internals.jit_statics(fn) is None and not _statics_warned:
        import jax

        _statics_warned = True
        warnings.warn(
            f"keras-xla-guard: jax {jax.__version__} keeps a jax.jit function's static arguments "
            "elsewhere than PjitFunction._jit_info: a change of a static argument is not named (its "
            "compilations are still counted)",
            XlaGuardWarning,
            stacklevel=3,
        )
    return StepProbe(
        jit_compile=True,
        signature=_CallReader(fn, names),
        executables=lambda: jax_internals.cache_size(fn),
        jitted=jitted,
    )
