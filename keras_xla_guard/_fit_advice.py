"""The callback's advice on XLA: what it diagnoses at train begin and the note it adds to a report.

At `on_train_begin` (on TensorFlow) the guard reads the process' XLA
switches, a saved `compare` result and, with `explain=`, whether the train
step compiles; the first report that needs advice gets it as notes
(`diagnose/advice.py` decides from that evidence). A mixin of
`XlaGuardCallback`.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from keras_xla_guard.diagnose.advice import JitEvidence
from keras_xla_guard.diagnose.strategy import strategy_verdicts
from keras_xla_guard.diagnose.verdict import ERROR, WARNING, Verdict
from keras_xla_guard.errors import XlaGuardWarning
from keras_xla_guard.runtime.config import LOW_COVERAGE
from keras_xla_guard.trace.report import CoverageReport

__all__ = ["FitAdvice"]


class FitAdvice:
    """The advice of `XlaGuardCallback`: its diagnosis at train begin and its verdict notes.

    The callback provides `engine`, `config`, `log_dir` and the model it
    runs in (`_fit_model`), and calls `_init_advice` from its constructor.
    """

    engine: Any
    config: Any
    log_dir: Any
    _fit_model: Any

    def _init_advice(self, explain: Any) -> None:
        """The state of the advice: nothing diagnosed, nothing noted."""
        self._explain = explain
        self.explain_report: Any = None
        self._switch_verdicts: tuple[Verdict, ...] = ()
        self._compare: dict[str, Any] | None = None
        self._accelerator = False
        self._noted = False
        self._note_lock = threading.Lock()

    def _verdict_notes(self, report: CoverageReport) -> list[str]:
        """The advice for the first report that needs it (`diagnose/advice.py`).

        A low coverage gets every verdict that explains it, an op that
        blocks `jit_compile=True` first; at a good coverage under
        auto-clustering such an op is still named (switching to
        `jit_compile=True` would break the run).
        """
        model = self._fit_model
        if model is None or not report.ok or report.non_xla_op_time_s == 0 or self._noted:
            return []
        from keras_xla_guard.diagnose.explain import model_verdicts

        evidence = self._evidence(report)
        own = model_verdicts(model, evidence)
        # Blockers come first: no XLA switch is worth reading before them.
        first = [v for v in own if v.code == "JIT_COMPILE_BLOCKED"]
        low = report.measured().xla_time_fraction < LOW_COVERAGE
        # At a good coverage only a blocker under auto-clustering is news:
        # the step runs, and switching to jit_compile=True would break it.
        if not low and not (first and evidence.autoclustering):
            return []
        with self._note_lock:
            if self._noted:
                return []
            self._noted = True
        if not low:
            return [v.as_note() for v in first]
        verdicts = first + list(self._switch_verdicts) + [v for v in own if v not in first]
        if any(v.code.startswith("STRATEGY_") for v in verdicts):
            # Its fix, compile(jit_compile=True), fails under the strategy.
            verdicts = [v for v in verdicts if v.code != "JIT_COMPILE_OFF"]
        if self.explain_report is not None:
            # Its own JIT_COMPILE_* verdict knew only explain's evidence.
            verdicts += [v for v in self.explain_report.verdicts if not v.code.startswith("JIT_COMPILE_")]
        # JIT_COMPILE_OFF is info when a saved compare found XLA does not pay: still the answer.
        notes = [v.as_note() for v in verdicts if v.status in (WARNING, ERROR) or v.code == "JIT_COMPILE_OFF"]
        if getattr(model, "jit_compile", False) and report.xla_time_s == 0:
            notes.append(
                "model.jit_compile is True but no XLA execution was recorded in "
                "this window; check the TensorFlow log for compilation errors"
            )
        return list(dict.fromkeys(notes))

    def _evidence(self, report: CoverageReport) -> JitEvidence:
        """What this run knows about `jit_compile=True`: blockers, auto-clustering, a saved `compare`."""
        from keras_xla_guard.diagnose.explain import blocker_names, trace_blockers

        # explain's ops in graph order first, then what only the run's op table shows.
        ops = list(self.explain_report.unsupported_ops) if self.explain_report is not None else []
        ops += trace_blockers(report, self._fit_model)
        return JitEvidence(
            blockers=blocker_names(ops),
            autoclustering=self.engine.xla_mode == "autoclustering",
            compare=self._compare,
            accelerator=self._accelerator,
            device="XLA_GPU_JIT" if self._accelerator else "XLA_CPU_JIT",
        )

    def _diagnose(self) -> None:
        """Gathers switch verdicts and the saved `compare` result, and runs `explain` (never raises)."""
        from keras_xla_guard.diagnose.doctor import doctor
        from keras_xla_guard.output.runfile import find_compare

        try:
            # A saved compare result decides the advice, whatever else fails here.
            self._compare = find_compare(self.config.log_dir)
        except (OSError, ValueError) as e:
            self._compare = None
            warnings.warn(
                f"keras-xla-guard: the compare result in {self.log_dir!r} is not read: {e}",
                XlaGuardWarning,
                stacklevel=3,
            )
        if self._compare is not None:
            from keras_xla_guard.comparison.report import same_model

            # The default log dir is shared by every script of a project: another model's
            # measurement is no evidence for this one.
            match, measured, here = same_model(self._compare, self._fit_model)
            if not match:
                self._compare = None
                warnings.warn(
                    f"keras-xla-guard: the compare result in {self.log_dir!r} measured another model "
                    f"({measured}; this fit trains {here}): it is not used as evidence. Run compare on this "
                    "model, or give each model its own log_dir.",
                    XlaGuardWarning,
                    stacklevel=3,
                )
        try:
            facts = doctor(probe=False, check_devices=False, resolve_keras=False)
            self._accelerator = any(not d.startswith("CPU:") for d in facts.physical_devices)
            # The model's own verdict (JIT_COMPILE_OFF or _BLOCKED) says
            # what these say process-wide, with the run's evidence; for a
            # jit_compile=True model they are wrong. They are left out.
            self._switch_verdicts = tuple(
                v
                for v in facts.problems
                if v.code not in ("XLA_NOT_REQUESTED", "JIT_COMPILE_AUTO_RESOLVES_FALSE")
            ) + tuple(strategy_verdicts(self._fit_model))
            for verdict in self._switch_verdicts:
                if verdict.code == "STRATEGY_JIT_COMPILE_FAILS":
                    # The first step will fail; this is the user's one chance
                    # to read why before TensorFlow's error.
                    warnings.warn(f"keras-xla-guard: {verdict}", XlaGuardWarning, stacklevel=3)
            if self._explain is not False and self._explain is not None:
                self._run_explain()
        except Exception as e:  # noqa: BLE001 - diagnosis must not break training
            warnings.warn(
                f"keras-xla-guard: diagnosis at train begin failed: {type(e).__name__}: {e}",
                XlaGuardWarning,
                stacklevel=3,
            )

    def _run_explain(self) -> None:
        from keras_xla_guard.diagnose.explain import explain

        model = self._fit_model
        batch = self._explain
        if batch is True:
            batch = _zeros_batch(model)
            if batch is None:
                warnings.warn(
                    "keras-xla-guard: explain=True needs a model with known inputs "
                    "(model.inputs); pass explain=(x, y) with one batch instead",
                    XlaGuardWarning,
                    stacklevel=4,
                )
                return
        self.explain_report = explain(model, batch)
        if not self.explain_report.compilable and getattr(model, "jit_compile", False):
            ops = ", ".join(
                f"{op.op_type} in layer {op.layer!r}" for op in self.explain_report.unsupported_ops
            )
            warnings.warn(
                "keras-xla-guard: the train step cannot compile with jit_compile=True: "
                f"{ops or self.explain_report.error}",
                XlaGuardWarning,
                stacklevel=4,
            )


def _zeros_batch(model: Any) -> Any:
    """A batch of zeros matching the model's input spec, or `None`."""
    import tensorflow as tf

    inputs = getattr(model, "inputs", None)
    if not inputs:
        return None
    tensors = []
    for spec in inputs:
        shape = [(2 if axis == 0 else 8) if size is None else size for axis, size in enumerate(spec.shape)]
        tensors.append(tf.zeros(shape, dtype=spec.dtype))
    return tensors[0] if len(tensors) == 1 else tensors
