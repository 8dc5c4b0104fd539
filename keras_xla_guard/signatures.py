"""Input signatures: which concrete shapes a compiled step saw, and why.

XLA compiles one executable per concrete input signature (structure, shapes,
dtypes). Keras builds its train step with `reduce_retracing=True`, so the
tf.function is traced once while XLA compiles again for every new batch
shape at run time. This module is pure Python (no TensorFlow, no Keras): it
turns nested structures of arrays, tensors or specs into `Signature`s, counts
them per epoch in a `SignatureTracker`, explains what varied, and recommends
bucket boundaries together with the tf.data code that applies them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_MAX_BUCKETS",
    "DEFAULT_MAX_PADDING",
    "EpochSignatures",
    "MEGAMORPHIC_COMPILE_THRESHOLD",
    "MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE",
    "Signature",
    "SignatureTracker",
    "bucketing_code",
    "closest",
    "flatten_leaves",
    "recommend_buckets",
]

# TensorFlow's own constants (tensorflow/compiler/jit/device_compilation_profiler.cc):
# a cluster compiled more than 10 times with fewer than 50 executions per compile
# is marked megamorphic and, under auto-clustering, no longer compiled.
MEGAMORPHIC_COMPILE_THRESHOLD = 10
MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE = 50
DEFAULT_MAX_BUCKETS = 4
DEFAULT_MAX_PADDING = 0.15
# How many new signatures an epoch's explanation compares with their closest
# earlier one; more would bury the headline.
_MAX_NEW_EXPLAINED = 3
_MAX_VALUES_LISTED = 10

Shape = tuple[int | None, ...] | None
PathKey = str | int


def _is_leaf(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _flatten(structure: Any, path: tuple[PathKey, ...] = ()) -> Iterator[tuple[tuple[PathKey, ...], Any]]:
    """Yields `(path, leaf)` in `tf.nest` order (dict keys sorted)."""
    if structure is None:
        return
    if _is_leaf(structure):
        yield path, structure
    elif isinstance(structure, Mapping):
        for key in sorted(structure):
            yield from _flatten(structure[key], path + (key,))
    elif isinstance(structure, tuple) and hasattr(structure, "_fields"):
        for name in structure._fields:
            yield from _flatten(getattr(structure, name), path + (name,))
    elif isinstance(structure, (list, tuple)):
        for i, item in enumerate(structure):
            yield from _flatten(item, path + (i,))


def flatten_leaves(structure: Any) -> list[Any]:
    """Returns the array-like leaves of `structure` in `Signature` order.

    Args:
        structure: A nested dict/list/tuple/namedtuple of arrays, tensors or
            specs (anything with `shape` and `dtype`); `None` is skipped.

    Returns:
        The leaves, in the order `Signature.of` lists them.
    """
    return [leaf for _, leaf in _flatten(structure)]


def _render_path(path: tuple[PathKey, ...], root_names: Sequence[str] | None, top_is_seq: bool) -> str:
    if not path:
        return root_names[0] if root_names else "input"
    parts: list[str] = []
    rest = path
    if root_names and top_is_seq and isinstance(path[0], int) and path[0] < len(root_names):
        parts.append(root_names[path[0]])
        rest = path[1:]
    for key in rest:
        parts.append(f"[{key}]" if isinstance(key, int) else f"[{key!r}]")
    return "".join(parts)


def _shape_of(leaf: Any) -> Shape:
    shape = leaf.shape
    if getattr(shape, "rank", 0) is None:
        return None
    dims = []
    for d in shape:
        d = getattr(d, "value", d)
        dims.append(None if d is None else int(d))
    return tuple(dims)


def _dtype_of(leaf: Any) -> str:
    dtype = leaf.dtype
    return str(getattr(dtype, "name", dtype))


def _format_shape(dtype: str, shape: Shape) -> str:
    if shape is None:
        return f"{dtype}[?]"
    return f"{dtype}[{','.join('?' if d is None else str(d) for d in shape)}]"


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
        dtypes: The leaves' dtype names, e.g. `"int32"`.

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

    @classmethod
    def of(cls, structure: Any, *, root_names: Sequence[str] | None = None) -> "Signature":
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
        paths, shapes, dtypes = [], [], []
        for path, leaf in _flatten(structure):
            paths.append(_render_path(path, root_names, top_is_seq))
            shapes.append(_shape_of(leaf))
            dtypes.append(_dtype_of(leaf))
        return cls(tuple(paths), tuple(shapes), tuple(dtypes))

    @property
    def structure(self) -> tuple[tuple[str, str, int | None], ...]:
        """Paths, dtypes and ranks: what must match for a dim-by-dim comparison."""
        return tuple(
            (p, d, None if s is None else len(s)) for p, d, s in zip(self.paths, self.dtypes, self.shapes)
        )

    def dynamic_dims(self) -> tuple[tuple[int, int], ...]:
        """`(leaf index, dim)` of every unknown (`None`) dimension of known rank."""
        return tuple(
            (i, d)
            for i, shape in enumerate(self.shapes)
            if shape is not None
            for d, size in enumerate(shape)
            if size is None
        )

    def with_dims(self, dims: Sequence[tuple[int, int]], values: Sequence[int]) -> "Signature":
        """Returns a copy with the given unknown dimensions filled in.

        Args:
            dims: `(leaf index, dim)` pairs, as from `dynamic_dims()`.
            values: One size per pair.

        Returns:
            The concrete signature.

        Raises:
            ValueError: If `dims` and `values` differ in length.
        """
        if len(dims) != len(values):
            raise ValueError(
                f"`values` must have one entry per dim ({len(dims)}). Received: values={tuple(values)!r}"
            )
        shapes = [list(s) if s is not None else None for s in self.shapes]
        for (leaf, dim), value in zip(dims, values):
            shapes[leaf][dim] = int(value)  # type: ignore[index]
        return dataclasses.replace(
            self, shapes=tuple(None if s is None else tuple(s) for s in shapes)
        )

    def describe_leaf(self, index: int) -> str:
        """`"<path>: <dtype>[<dims>]"` for one leaf."""
        return f"{self.paths[index]}: {_format_shape(self.dtypes[index], self.shapes[index])}"

    def __str__(self) -> str:
        return ", ".join(self.describe_leaf(i) for i in range(len(self.paths))) or "(no arrays)"

    def to_dict(self) -> dict[str, Any]:
        """Returns the signature as a JSON-serializable dict."""
        return {
            "paths": list(self.paths),
            "shapes": [None if s is None else list(s) for s in self.shapes],
            "dtypes": list(self.dtypes),
        }


def _input_name(sig: Signature, index: int) -> str:
    """How messages name a leaf: its dict key when unique, else its path."""
    path = sig.paths[index]
    if path.endswith("']"):
        key = path[path.rfind("['") + 2 : -2]
        if sum(p.endswith(f"['{key}']") for p in sig.paths) == 1:
            return f"input '{key}'"
    return f"input {path}"


def _differences(new: Signature, old: Signature) -> list[str]:
    if new.structure != old.structure:
        return ["the input structure (paths, dtypes or ranks) changed"]
    out = []
    for i, (a, b) in enumerate(zip(new.shapes, old.shapes)):
        if a == b or a is None or b is None:
            continue
        dims = [f"dim {d}: {y} -> {x}" for d, (x, y) in enumerate(zip(a, b)) if x != y]
        out.append(
            f"{new.paths[i]}: {_format_shape(new.dtypes[i], a)} vs "
            f"{_format_shape(old.dtypes[i], b)} ({', '.join(dims)})"
        )
    return out


def _only_batch_shrunk(short: Signature, full: Signature) -> bool:
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
    if a.structure != b.structure:
        return 1 << 30
    return sum(
        x != y
        for sa, sb in zip(a.shapes, b.shapes)
        if sa is not None and sb is not None
        for x, y in zip(sa, sb)
    )


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


def recommend_buckets(
    lengths: Mapping[int, int] | Sequence[int],
    *,
    max_buckets: int = DEFAULT_MAX_BUCKETS,
    max_padding: float = DEFAULT_MAX_PADDING,
) -> tuple[int, ...]:
    """Picks padded lengths (bucket boundaries) for observed sequence lengths.

    The lengths are split into the fewest contiguous groups (at most
    `max_buckets`) whose padding stays within `max_padding` of the padded
    total; each group is padded to its longest member, so every boundary
    is an observed length and the last one is the longest length seen.

    Args:
        lengths: Observed lengths, either a sequence (one entry per batch)
            or a mapping length -> number of batches.
        max_buckets: Most buckets (compilations) to allow. Defaults to `4`.
        max_padding: Largest acceptable share of padding in the padded
            total, in [0, 1). Defaults to `0.15`.

    Returns:
        Sorted padded lengths, one per bucket; `()` when `lengths` is empty.

    Raises:
        ValueError: If an argument is out of range.

    Example:

    ```python
    from keras_xla_guard.signatures import recommend_buckets

    recommend_buckets([5, 7, 9, 11, 13])  # (7, 11, 13)
    ```
    """
    if isinstance(max_buckets, bool) or not isinstance(max_buckets, int) or max_buckets < 1:
        raise ValueError(f"`max_buckets` must be an integer >= 1. Received: max_buckets={max_buckets!r}")
    if not 0 <= max_padding < 1:
        raise ValueError(f"`max_padding` must be in [0, 1). Received: max_padding={max_padding!r}")
    counts: dict[int, int] = {}
    items = lengths.items() if isinstance(lengths, Mapping) else ((n, 1) for n in lengths)
    for length, count in items:
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise ValueError(f"lengths must be integers >= 0. Received: lengths={lengths!r}")
        counts[length] = counts.get(length, 0) + count
    values = sorted(counts)
    if not values:
        return ()
    real = sum(n * c for n, c in counts.items())
    best: tuple[int, ...] = (values[-1],)
    for k in range(1, min(max_buckets, len(values)) + 1):
        padded, bounds = _partition(values, counts, k)
        best = bounds
        if padded == 0 or (padded - real) / padded <= max_padding:
            break
    return best


def _partition(values: list[int], counts: dict[int, int], k: int) -> tuple[int, tuple[int, ...]]:
    """Splits sorted `values` into `k` groups minimising the padded total."""
    n = len(values)
    prefix = [0]
    for v in values:
        prefix.append(prefix[-1] + counts[v])
    inf = float("inf")
    # cost[j][i]: least padded total for values[:i] in j groups.
    cost = [[inf] * (n + 1) for _ in range(k + 1)]
    split = [[0] * (n + 1) for _ in range(k + 1)]
    cost[0][0] = 0
    for j in range(1, k + 1):
        for i in range(1, n + 1):
            for s in range(j - 1, i):
                c = cost[j - 1][s] + values[i - 1] * (prefix[i] - prefix[s])
                if c < cost[j][i]:
                    cost[j][i], split[j][i] = c, s
    bounds = []
    i = n
    for j in range(k, 0, -1):
        bounds.append(values[i - 1])
        i = split[j][i]
    return int(cost[k][n]), tuple(sorted(bounds))


def _element_args(root_count: int) -> str:
    names = ("x", "y", "sample_weight")
    if root_count <= 1:
        return "x"
    return ", ".join(names[:root_count]) if root_count <= 3 else "*element"


def _unbatched_access(path: str, root_count: int) -> str:
    """Rewrites a display path like `x['tokens']` into Python for the lambda."""
    if root_count > 3 and path.startswith(("x", "y", "sample_weight")):
        head = path.split("[", 1)[0]
        path = f"element[{('x', 'y', 'sample_weight').index(head)}]" + path[len(head):]
    return path.replace("['", '["').replace("']", '"]')


def bucketing_code(
    path: str,
    dim: int,
    boundaries: Sequence[int],
    batch_size: int,
    *,
    root_count: int = 2,
) -> str:
    """The tf.data code that pads one variable dimension to bucket lengths.

    The code applies to the *unbatched* dataset (one example per element):
    it replaces the `batch`/`padded_batch` call, so batch dimension `dim`
    of the batched input becomes dimension `dim - 1` of an element.

    Args:
        path: Display path of the input, e.g. `"x['tokens']"`.
        dim: The varying dimension of the batched input (>= 1).
        boundaries: Padded lengths, as from `recommend_buckets`.
        batch_size: Examples per batch.
        root_count: Entries of the dataset's top-level tuple (2 for
            `(x, y)`, 1 for a bare `x`). Defaults to `2`.

    Returns:
        Python source (several lines), ready to paste.

    Raises:
        ValueError: If `dim` < 1, `boundaries` is empty or `batch_size` < 1.

    Example:

    ```python
    from keras_xla_guard.signatures import bucketing_code

    print(bucketing_code("x['tokens']", 1, (16, 32, 64), batch_size=32))
    ```
    """
    if dim < 1:
        raise ValueError(f"`dim` must be a non-batch dimension (>= 1). Received: dim={dim!r}")
    if not boundaries:
        raise ValueError(f"`boundaries` must not be empty. Received: boundaries={boundaries!r}")
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1. Received: batch_size={batch_size!r}")
    bounds = sorted(set(int(b) for b in boundaries))
    access = _unbatched_access(path, root_count)
    args = _element_args(root_count)
    tf_bounds = [b + 1 for b in bounds]
    return "\n".join(
        [
            f"# Pad {path} dim {dim} to {len(bounds)} bucket length(s) {tuple(bounds)}; "
            "full batches only.",
            "# Replaces .batch()/.padded_batch() on the unbatched dataset:",
            "dataset = dataset.bucket_by_sequence_length(",
            f"    element_length_func=lambda {args}: tf.shape({access})[{dim - 1}],",
            f"    bucket_boundaries={tf_bounds},  # exclusive upper bounds",
            f"    bucket_batch_sizes={[batch_size] * (len(bounds) + 1)},",
            "    pad_to_bucket_boundary=True,  # pads to boundary - 1",
            "    drop_remainder=True,",
            ")",
            "# or, with keras-xla-guard:",
            "# from keras_xla_guard.data import pad_to_buckets",
            f"# dataset = pad_to_buckets(dataset, {tuple(bounds)}, batch_size={batch_size})",
        ]
    )


@dataclass(frozen=True)
class EpochSignatures:
    """Input signatures of one epoch.

    Attributes:
        epoch: 0-based epoch index.
        steps: Training steps observed in the epoch.
        distinct_signatures: Different signatures seen in the epoch.
        new_signatures: Signatures first seen in this epoch (of the run).
        expected_compilations: XLA compilations the new signatures cause
            (one each), or `None` when the step is not compiled with XLA.
        compilations_so_far: Signatures seen in the run up to this epoch's
            end (predicted compilations of the step, all epochs together).
        short_last_batch: Whether the epoch ended with a batch that only
            differs in dimension 0 and occurred only as a last batch.
        explanations: Human-readable lines: what varied, the closest
            earlier signature of new ones, the fix.
        signatures: The distinct signatures of the epoch, first seen first.
    """

    epoch: int
    steps: int
    distinct_signatures: int
    new_signatures: int
    expected_compilations: int | None
    compilations_so_far: int
    short_last_batch: bool
    explanations: tuple[str, ...]
    signatures: tuple[Signature, ...]

    def to_dict(self) -> dict[str, Any]:
        """Returns the epoch's figures as a JSON-serializable dict."""
        d = dataclasses.asdict(self)
        d["explanations"] = list(self.explanations)
        d["signatures"] = [s.to_dict() for s in self.signatures]
        return d


@dataclass
class _SigStats:
    first_epoch: int
    first_step: int | None
    count: int = 0
    last_of_epoch: int = 0


class SignatureTracker:
    """Counts input signatures per epoch and explains new ones.

    Feed it each step's signature with `observe`; `end_epoch` returns the
    epoch's `EpochSignatures`. A signature is *new* the first time the run
    sees it; with XLA on, each new signature is one expected compilation.

    Args:
        xla: Whether the observed step is compiled with XLA (only then
            `expected_compilations` is reported). Defaults to `False`.
        max_buckets: Most buckets a bucketing recommendation may use.
            Defaults to `4`.
        max_padding: Acceptable padding share of a recommendation.
            Defaults to `0.15`.

    Raises:
        ValueError: If `max_buckets` or `max_padding` is out of range.

    Example:

    ```python
    import numpy as np
    from keras_xla_guard.signatures import Signature, SignatureTracker

    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(0)
    for length in (5, 7, 9, 11, 13):
        tracker.observe(Signature.of({"tokens": np.zeros((8, length))}))
    stats = tracker.end_epoch()
    print(stats.expected_compilations)  # 5
    print(stats.explanations[0])  # input 'tokens' dim 1 varied across 5 values (5, 7, 9, 11, 13)
    ```
    """

    def __init__(
        self,
        xla: bool = False,
        max_buckets: int = DEFAULT_MAX_BUCKETS,
        max_padding: float = DEFAULT_MAX_PADDING,
    ) -> None:
        recommend_buckets((), max_buckets=max_buckets, max_padding=max_padding)
        self.xla = bool(xla)
        self.max_buckets = max_buckets
        self.max_padding = max_padding
        self._stats: dict[Signature, _SigStats] = {}
        self._order: list[Signature] = []
        self._executions = 0
        self._epoch: int | None = None
        self._epoch_counts: dict[Signature, int] = {}
        self._epoch_new: list[tuple[Signature, int | None]] = []
        self._epoch_steps = 0
        self._last: Signature | None = None

    @property
    def total_signatures(self) -> int:
        """Distinct signatures seen in the run (= compilations with XLA)."""
        return len(self._order)

    @property
    def executions(self) -> int:
        """Steps observed in the run."""
        return self._executions

    @property
    def epoch_new_signatures(self) -> int:
        """Signatures first seen in the current epoch so far."""
        return len(self._epoch_new)

    def begin_epoch(self, epoch: int) -> None:
        """Starts counting a new epoch.

        Args:
            epoch: 0-based epoch index.
        """
        self._epoch = epoch
        self._epoch_counts = {}
        self._epoch_new = []
        self._epoch_steps = 0
        self._last = None

    def observe(self, signature: Signature, step: int | None = None, count: int = 1) -> bool:
        """Records `count` steps run with `signature`.

        Args:
            signature: The steps' input signature.
            step: 0-based index of the (first) step in the epoch, if known.
            count: Number of consecutive steps with this signature.
                Defaults to `1`.

        Returns:
            Whether the signature is new to the run.
        """
        if self._epoch is None:
            self.begin_epoch(0)
        stats = self._stats.get(signature)
        new = stats is None
        if stats is None:
            stats = self._stats[signature] = _SigStats(self._epoch or 0, step)
            self._order.append(signature)
            self._epoch_new.append((signature, step))
        stats.count += count
        self._epoch_counts[signature] = self._epoch_counts.get(signature, 0) + count
        self._epoch_steps += count
        self._executions += count
        self._last = signature
        return new

    def end_epoch(self) -> EpochSignatures:
        """Finishes the epoch and explains it.

        Returns:
            The epoch's signature figures and explanations.
        """
        epoch = self._epoch if self._epoch is not None else 0
        if self._last is not None:
            self._stats[self._last].last_of_epoch += 1
        sigs = tuple(s for s in self._order if s in self._epoch_counts)
        short = self._short_last_batch(sigs)
        result = EpochSignatures(
            epoch=epoch,
            steps=self._epoch_steps,
            distinct_signatures=len(sigs),
            new_signatures=len(self._epoch_new),
            expected_compilations=len(self._epoch_new) if self.xla else None,
            compilations_so_far=len(self._order),
            short_last_batch=short is not None,
            explanations=tuple(self._explain(sigs, short)),
            signatures=sigs,
        )
        self._epoch = None
        return result

    def current_explanations(self) -> tuple[str, ...]:
        """Explanations of the current epoch so far (before `end_epoch`).

        Returns:
            The lines `end_epoch` would give now, without the short-last-batch
            verdict (the last batch is not known yet).
        """
        sigs = tuple(s for s in self._order if s in self._epoch_counts)
        return tuple(self._explain(sigs, None))

    def megamorphic_risk(self) -> bool:
        """Whether the run is close to TensorFlow's megamorphic threshold.

        Returns:
            `True` once at least `MEGAMORPHIC_COMPILE_THRESHOLD - 2`
            signatures were seen with fewer than 50 executions per compile.
        """
        compiles = len(self._order)
        return (
            compiles >= MEGAMORPHIC_COMPILE_THRESHOLD - 2
            and self._executions < MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE * compiles
        )

    # ------------------------------------------------------------ internals

    def _short_last_batch(self, sigs: tuple[Signature, ...]) -> tuple[Signature, Signature] | None:
        """`(short, full)` when the epoch's last batch is a short last batch."""
        last = self._last
        if last is None or len(sigs) < 2:
            return None
        stats = self._stats[last]
        if stats.count != stats.last_of_epoch:
            return None
        matches = [s for s in sigs if s != last and _only_batch_shrunk(last, s)]
        if not matches:
            return None
        return last, max(matches, key=lambda s: self._epoch_counts[s])

    def _varying(self, sigs: Sequence[Signature]) -> list[tuple[int, int, list[int]]]:
        """`(leaf, dim, sorted values)` for every dimension that took several values."""
        groups: dict[tuple[Any, ...], list[Signature]] = {}
        for s in sigs:
            groups.setdefault(s.structure, []).append(s)
        out = []
        for members in groups.values():
            ref = members[0]
            for leaf, shape in enumerate(ref.shapes):
                if shape is None:
                    continue
                for dim in range(len(shape)):
                    values = {m.shapes[leaf][dim] for m in members}  # type: ignore[index]
                    values.discard(None)
                    if len(values) > 1:
                        out.append((leaf, dim, sorted(values)))  # type: ignore[arg-type]
        return out

    def _explain(
        self, sigs: tuple[Signature, ...], short: tuple[Signature, Signature] | None
    ) -> list[str]:
        if not sigs:
            return []
        lines: list[str] = []
        if len({s.structure for s in sigs}) > 1:
            lines.append(
                f"the input structure itself changed: {len({s.structure for s in sigs})} different "
                "structures (paths, dtypes or ranks) in this epoch"
            )
        regular = [s for s in sigs if short is None or s != short[0]]
        varying = self._varying(regular)
        ref = regular[0]
        for leaf, dim, values in varying:
            shown = ", ".join(str(v) for v in values[:_MAX_VALUES_LISTED])
            more = ", ..." if len(values) > _MAX_VALUES_LISTED else ""
            lines.append(
                f"{_input_name(ref, leaf)} dim {dim} varied across {len(values)} values ({shown}{more})"
            )
        if short is not None:
            last, full = short
            leaf = next(i for i, (a, b) in enumerate(zip(last.shapes, full.shapes)) if a and b and a[0] != b[0])
            lines.append(
                f"short last batch: {_input_name(last, leaf)} dim 0 was {last.shapes[leaf][0]} "  # type: ignore[index]
                f"in the last batch only (other batches: {full.shapes[leaf][0]}); "  # type: ignore[index]
                "it costs one extra compilation per run - batch with drop_remainder=True "
                "or make the number of examples a multiple of the batch size"
            )
        for sig, step in self._epoch_new[:_MAX_NEW_EXPLAINED]:
            earlier = self._order[: self._order.index(sig)]
            where = f" at step {step}" if step is not None else ""
            near = closest(sig, earlier)
            if near is None:
                lines.append(f"first signature{where}: {sig}")
                continue
            diffs = "; ".join(_differences(sig, near)) or "no shape difference"
            lines.append(f"new signature{where}: {diffs} (closest earlier signature: {near})")
        hidden = len(self._epoch_new) - _MAX_NEW_EXPLAINED
        if hidden > 0:
            lines.append(f"... and {hidden} more new signature(s) in this epoch")
        fix = self._recommendation(regular, varying)
        if fix:
            lines.append(fix)
        return lines

    def _recommendation(self, sigs: Sequence[Signature], varying: list[tuple[int, int, list[int]]]) -> str:
        length_dims = [(leaf, dim) for leaf, dim, _ in varying if dim >= 1]
        if not length_dims:
            return ""
        leaf, dim = length_dims[0]
        ref = sigs[0]
        lengths: dict[int, int] = {}
        batch_sizes: dict[int, int] = {}
        for s in sigs:
            if s.structure != ref.structure:
                continue
            shape = s.shapes[leaf]
            n = self._epoch_counts.get(s, 1)
            if shape is None or shape[dim] is None:
                continue
            lengths[shape[dim]] = lengths.get(shape[dim], 0) + n  # type: ignore[index]
            if shape[0] is not None:
                batch_sizes[shape[0]] = batch_sizes.get(shape[0], 0) + n
        bounds = recommend_buckets(lengths, max_buckets=self.max_buckets, max_padding=self.max_padding)
        if len(bounds) >= len(lengths):
            return ""
        batch = max(batch_sizes, key=lambda b: batch_sizes[b]) if batch_sizes else 32
        roots = {p.split("[", 1)[0] for p in ref.paths}
        root_count = 1 if roots <= {"x", "input"} else (3 if "sample_weight" in roots else 2)
        code = bucketing_code(ref.paths[leaf], dim, bounds, batch, root_count=root_count)
        return (
            f"fix: pad {_input_name(ref, leaf)} dim {dim} to {len(bounds)} bucket length(s) "
            f"{bounds} -> at most {len(bounds)} compilation(s) instead of {len(lengths)}:\n{code}"
        )
