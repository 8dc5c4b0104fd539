"""`SignatureTracker`: counts a run's input signatures per epoch and explains them.

Keras builds its train step with `reduce_retracing=True`, so the tf.function is
traced once while XLA compiles again for every new batch shape at run time.
The tracker counts the signatures of every step per epoch (each new one is one
XLA compilation), says what varied, and recommends bucket boundaries together
with the code that applies them (tf.data, or `pad_to_buckets` on the
examples). Pure Python (no TensorFlow, no Keras).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from keras_xla_guard._checks import check_bool
from keras_xla_guard.signatures.buckets import (
    DEFAULT_MAX_BUCKETS,
    DEFAULT_MAX_PADDING,
    INPUT_PIPELINES,
    TF_DATA,
    bucketing_code,
    recommend_buckets,
    short_batch_advice,
)
from keras_xla_guard.signatures.explanation import (
    BUCKETING_FIX,
    DIM_VARIED,
    FIRST_SIGNATURE,
    MORE_NEW_SIGNATURES,
    NEW_SIGNATURE,
    SHORT_LAST_BATCH,
    STRUCTURE_CHANGED,
    WARM_UP_MISSED,
    Explanation,
)
from keras_xla_guard.signatures.signature import (
    Signature,
    closest,
    differences,
    input_name,
    only_batch_shrunk,
)

__all__ = [
    "FUNCTIONS",
    "EpochSignatures",
    "MEGAMORPHIC_COMPILE_THRESHOLD",
    "MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE",
    "SignatureTracker",
]

# TensorFlow's own constants (tensorflow/compiler/jit/device_compilation_profiler.cc):
# a cluster compiled more than 10 times with fewer than 50 executions per compile
# is marked megamorphic and, under auto-clustering, no longer compiled.
MEGAMORPHIC_COMPILE_THRESHOLD = 10
MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE = 50
# How many new signatures an epoch's explanation compares with their closest
# earlier one; more would bury the headline.
_MAX_NEW_EXPLAINED = 3
# The functions a Keras model compiles on its own, each with its own
# signatures and compilations: `fit`'s steps, `evaluate`'s (and the
# validation inside `fit`), `predict`'s.
FUNCTIONS = ("train", "test", "predict")
_MAX_VALUES_LISTED = 10


@dataclass(frozen=True)
class EpochSignatures:
    """Input signatures of one epoch.

    One training epoch of the train function, or one call of the test or
    predict function (a validation inside `fit`, an `evaluate`, a
    `predict`): each of Keras' functions is compiled on its own, so each
    has its own signatures and compilations.

    Attributes:
        epoch: 0-based epoch index; for a test or predict call, the `fit`
            epoch it validated, `None` for a call outside `fit`.
        steps: Steps observed in the epoch (or call).
        distinct_signatures: Different signatures seen in the epoch.
        new_signatures: Signatures first seen in this epoch (of the run).
        expected_compilations: XLA compilations the new signatures cause
            (one each), or `None` when the step is not compiled with XLA.
        compilations_so_far: Signatures seen in the run up to this epoch's
            end (predicted compilations of the step, all epochs together).
        short_last_batch: Whether the epoch ended with a batch that only
            differs in dimension 0 and occurred only as a last batch.
        explanations: The epoch's findings as `Explanation`s: what
            varied, the closest earlier signature of new ones, the fix.
        signatures: The distinct signatures of the epoch, first seen first.
        new: The signatures first seen in this epoch with the step (in the
            epoch) each was first seen at, `None` when not known; first
            seen first.
        function: The function whose steps these are: `"train"`, `"test"`
            or `"predict"` (see `FUNCTIONS`).
    """

    epoch: int | None
    steps: int
    distinct_signatures: int
    new_signatures: int
    expected_compilations: int | None
    compilations_so_far: int
    short_last_batch: bool
    explanations: tuple[Explanation, ...]
    signatures: tuple[Signature, ...]
    new: tuple[tuple[Signature, int | None], ...] = ()
    function: str = "train"

    def to_dict(self) -> dict[str, Any]:
        """Returns the epoch's figures as a JSON-serializable dict."""
        d = dataclasses.asdict(self)
        d["explanations"] = [e.to_dict() for e in self.explanations]
        d["signatures"] = [s.to_dict() for s in self.signatures]
        d["new"] = [{"signature": s.to_dict(), "step": n} for s, n in self.new]
        return d


@dataclass
class _SigStats:
    # The run's first copy of the signature: later steps' equal copies are
    # swapped for it, so the epoch's lookups match by identity.
    signature: Signature
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
        function: The function whose steps are observed, one of
            `FUNCTIONS`; named in every `EpochSignatures`. Defaults to
            `"train"`.
        input_pipeline: What the fixes are written for: `"tf.data"` or
            `"examples"` (`pad_to_buckets` on the examples, NumPy
            slicing; no TensorFlow), as the backend's
            `Backend.input_pipeline` says. Defaults to `"tf.data"`.

    Raises:
        ValueError: If `max_buckets` or `max_padding` is out of range,
            `function` is not one of `FUNCTIONS` or `input_pipeline` not
            one of `INPUT_PIPELINES`.

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
        function: str = "train",
        input_pipeline: str = TF_DATA,
    ) -> None:
        recommend_buckets((), max_buckets=max_buckets, max_padding=max_padding)
        if function not in FUNCTIONS:
            raise ValueError(f"`function` must be one of {FUNCTIONS}. Received: function={function!r}")
        if input_pipeline not in INPUT_PIPELINES:
            raise ValueError(
                f"`input_pipeline` must be one of {INPUT_PIPELINES}. Received: input_pipeline={input_pipeline!r}"
            )
        self.function = function
        self.input_pipeline = input_pipeline
        self.xla = check_bool("xla", xla)
        self.max_buckets = max_buckets
        self.max_padding = max_padding
        self._stats: dict[Signature, _SigStats] = {}
        self._order: list[Signature] = []
        self._executions = 0
        self._epoch: int | None = None
        self._open = False
        self._epoch_counts: dict[Signature, int] = {}
        self._epoch_new: list[tuple[Signature, int | None]] = []
        self._epoch_steps = 0
        self._last: Signature | None = None
        self._warmed: tuple[Signature, ...] = ()

    @property
    def total_signatures(self) -> int:
        """Distinct signatures seen in the run (= compilations with XLA)."""
        return len(self._order)

    @property
    def seen(self) -> tuple[Signature, ...]:
        """Distinct signatures seen in the run, first seen first."""
        return tuple(self._order)

    @property
    def executions(self) -> int:
        """Steps observed in the run."""
        return self._executions

    @property
    def epoch_new_signatures(self) -> int:
        """Signatures first seen in the current epoch so far."""
        return len(self._epoch_new)

    def seed(self, signatures: Sequence[Signature]) -> None:
        """Takes the signatures `warm_up` compiled before the run's first step.

        They count as seen (a step that brings one is no new signature:
        its program is compiled), and a new signature with one's shapes
        but other dtypes or structure is named as one the warm-up missed.

        Args:
            signatures: The warmed signatures (`WarmUpReport.signatures`).
        """
        for signature in signatures:
            if signature not in self._stats:
                self._stats[signature] = _SigStats(signature)
                self._order.append(signature)
        self._warmed += tuple(signatures)

    def begin_epoch(self, epoch: int | None) -> None:
        """Starts counting a new epoch (or a test or predict call).

        Args:
            epoch: 0-based epoch index; `None` for a call outside `fit`.
        """
        self._epoch = epoch
        self._open = True
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
        if not self._open:
            self.begin_epoch(0)
        stats = self._stats.get(signature)
        new = stats is None
        if stats is None:
            stats = self._stats[signature] = _SigStats(signature)
            self._order.append(signature)
            self._epoch_new.append((signature, step))
        else:
            signature = stats.signature
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
        epoch = self._epoch if self._open else 0
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
            new=tuple(self._epoch_new),
            function=self.function,
        )
        self._epoch = None
        self._open = False
        return result

    def current_explanations(self) -> tuple[Explanation, ...]:
        """Explanations of the current epoch so far (before `end_epoch`).

        Returns:
            The lines `end_epoch` would give now, without the short-last-batch
            verdict (the last batch is not known yet).
        """
        sigs = tuple(s for s in self._order if s in self._epoch_counts)
        return tuple(self._explain(sigs, None))

    def explain_signature(self, signature: Signature, step: int | None = None) -> Explanation:
        """What `signature` changed against the closest signature the run saw before it.

        The line the epoch's explanations carry for each new signature.

        Args:
            signature: A signature the tracker has observed.
            step: The step it was first seen at, if known. Defaults to
                `None`.

        Returns:
            A `"first_signature"` explanation when the run saw no signature
            before it, else a `"new_signature"` one naming the differing
            dimensions and the closest earlier signature.

        Raises:
            ValueError: If the tracker never observed `signature`.
        """
        if signature not in self._stats:
            raise ValueError(f"The tracker never observed this signature. Received: signature={signature}")
        where = f" at step {step}" if step is not None else ""
        near = closest(signature, self._order[: self._order.index(signature)])
        if near is None:
            return Explanation(FIRST_SIGNATURE, f"first signature{where}: {signature}", step=step)
        diffs = "; ".join(differences(signature, near)) or "no shape difference"
        return Explanation(
            NEW_SIGNATURE,
            f"new signature{where}: {diffs} (closest earlier signature: {near})",
            step=step,
        )

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
        matches = [s for s in sigs if s != last and only_batch_shrunk(last, s)]
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
                    # One structure means one rank, so every member has this leaf's shape.
                    sizes = (_size(m, leaf, dim) for m in members)
                    values = {v for v in sizes if v is not None}
                    if len(values) > 1:
                        out.append((leaf, dim, sorted(values)))
        return out

    def _explain(
        self, sigs: tuple[Signature, ...], short: tuple[Signature, Signature] | None
    ) -> list[Explanation]:
        if not sigs:
            return []
        found: list[Explanation] = []
        structures = len({s.structure for s in sigs})
        if structures > 1:
            found.append(
                Explanation(
                    STRUCTURE_CHANGED,
                    f"the input structure itself changed: {structures} different "
                    "structures (paths, dtypes or ranks) in this epoch",
                    severity="warning",
                )
            )
        regular = [s for s in sigs if short is None or s != short[0]]
        varying = self._varying(regular)
        ref = regular[0]
        for leaf, dim, values in varying:
            shown = ", ".join(str(v) for v in values[:_MAX_VALUES_LISTED])
            more = ", ..." if len(values) > _MAX_VALUES_LISTED else ""
            found.append(
                Explanation(
                    DIM_VARIED,
                    f"{input_name(ref, leaf)} dim {dim} varied across {len(values)} values ({shown}{more})",
                    severity="warning",
                    input=ref.paths[leaf],
                    dim=dim,
                    values=tuple(values),
                )
            )
        if short is not None:
            last, full = short
            # only_batch_shrunk matched them: every dim 0 both have is known.
            leaf, short_size, full_size = next(
                (i, a[0], b[0])
                for i, (a, b) in enumerate(zip(last.shapes, full.shapes))
                if a and b and a[0] is not None and b[0] is not None and a[0] != b[0]
            )
            found.append(
                Explanation(
                    SHORT_LAST_BATCH,
                    f"short last batch: {input_name(last, leaf)} dim 0 was {short_size} "
                    f"in the last batch only (other batches: {full_size}); {self._short_batch_cost(short_size, full_size)}",
                    severity="warning" if self.xla else "info",
                    input=last.paths[leaf],
                    dim=0,
                    values=(short_size, full_size),
                )
            )
        for sig, step in self._epoch_new[:_MAX_NEW_EXPLAINED]:
            found.append(self.explain_signature(sig, step))
        hidden = len(self._epoch_new) - _MAX_NEW_EXPLAINED
        if hidden > 0:
            found.append(
                Explanation(MORE_NEW_SIGNATURES, f"... and {hidden} more new signature(s) in this epoch")
            )
        found += self._warm_up_missed()
        # The fix belongs to the epochs that compiled: an epoch of shapes
        # seen before repeats no "instead of N". Without XLA nothing compiles
        # per shape, and padding would only add work; the bucketing code
        # drops each bucket's short last batch, which a validation or
        # prediction must not lose.
        fix = (
            self._recommendation(regular, varying)
            if self._epoch_new and self.xla and self.function == "train"
            else None
        )
        if fix is not None:
            found.append(fix)
        return found

    def _warm_up_missed(self) -> list[Explanation]:
        """A finding per new signature whose shapes a warmed signature had, with other dtypes or paths."""
        found = []
        for sig, step in self._epoch_new:
            warmed = next((w for w in self._warmed if w.shapes == sig.shapes), None)
            if warmed is None:
                continue
            what = "dtypes" if warmed.paths == sig.paths else "structure"
            found.append(
                Explanation(
                    WARM_UP_MISSED,
                    f"warm_up compiled {warmed} but the step ran {sig} (other {what}): the warm-up did "
                    f"not cover it and it compiled again; give warm_up the {what} the step gets (e.g. "
                    "arrays or a batch of your data as the signature)",
                    severity="warning",
                    step=step,
                )
            )
        return found

    def _short_batch_cost(self, short_size: int, full_size: int) -> str:
        """What a short last batch costs this function, and the fix where dropping it is harmless."""
        if not self.xla:
            return "without XLA it compiles nothing"
        advice, dropping = short_batch_advice(self.input_pipeline, full_size)
        if self.function != "train":
            results = "metrics" if self.function == "test" else "predictions"
            return (
                f"it costs one extra compilation per run; {dropping} would leave those "
                f"{short_size} examples out of the {results}, so keep it"
            )
        return (
            f"it costs one extra compilation per run - {advice} (which leaves "
            f"those {short_size} examples out of every epoch) or make the number of examples a multiple "
            "of the batch size"
        )

    def _recommendation(
        self, sigs: Sequence[Signature], varying: list[tuple[int, int, list[int]]]
    ) -> Explanation | None:
        length_dims = [(leaf, dim) for leaf, dim, _ in varying if dim >= 1]
        if not length_dims:
            return None
        leaf, dim = length_dims[0]
        ref = sigs[0]
        # The fix (tf.data or pad_to_buckets) pads every variable dimension
        # of every input to this one's bucket: right only when they all vary
        # with it (tokens and their mask), else it pads one input to
        # another's length.
        if any(
            s.shapes[leaf] is not None
            and s.shapes[other] is not None
            and _size(s, other, d) != _size(s, leaf, dim)
            for s in sigs
            if s.structure == ref.structure
            for other, d in length_dims
        ):
            return None
        # So every varying input of that structure is padded with it: the fix names them all.
        together = length_dims
        lengths: dict[int, int] = {}
        batch_sizes: dict[int, int] = {}
        for s in sigs:
            if s.structure != ref.structure:
                continue
            shape = s.shapes[leaf]
            n = self._epoch_counts.get(s, 1)
            size = _size(s, leaf, dim)
            if shape is None or size is None:
                continue
            lengths[size] = lengths.get(size, 0) + n
            if shape[0] is not None:
                batch_sizes[shape[0]] = batch_sizes.get(shape[0], 0) + n
        bounds = recommend_buckets(lengths, max_buckets=self.max_buckets, max_padding=self.max_padding)
        if len(bounds) >= len(lengths):
            return None
        batch = max(batch_sizes, key=lambda b: batch_sizes[b]) if batch_sizes else 32
        roots = {p.split("[", 1)[0] for p in ref.paths}
        root_count = 1 if roots <= {"x", "input"} else (3 if "sample_weight" in roots else 2)
        names = [f"{input_name(ref, other)} dim {d}" for other, d in together]
        what = (
            names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]} (they vary together)"
        )
        return Explanation(
            BUCKETING_FIX,
            f"fix: pad {what} to {len(bounds)} bucket length(s) "
            f"({', '.join(map(str, bounds))}) -> at most {len(bounds)} compilation(s) instead of {len(lengths)}",
            input=ref.paths[leaf],
            dim=dim,
            values=tuple(bounds),
            fix_code=bucketing_code(
                ref.paths[leaf],
                dim,
                bounds,
                batch,
                root_count=root_count,
                together=[ref.paths[other] for other, _ in together[1:]],
                pipeline=self.input_pipeline,
            ),
        )


def _size(sig: Signature, leaf: int, dim: int) -> int | None:
    """The size of `sig`'s input `leaf` in dimension `dim`; `None` when unknown."""
    shape = sig.shapes[leaf]
    return None if shape is None else shape[dim]
