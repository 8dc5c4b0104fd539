"""Advice about XLA that never slows or breaks a run: measured, or hedged with measured figures.

Telling a user to compile with XLA can slow the run (on a CPU XLA often
loses; the figures below) or break it (an op without an XLA kernel makes
`compile(jit_compile=True)` fail in Keras). Every place that gives this
advice (the callback's and the loop guard's notes, `explain`, `doctor`)
builds it here, from the evidence the run has, in this order:

1. ops of the step without an XLA kernel (seen running in the trace, or
   found by `explain`) are named first, as blockers: `jit_compile=True`
   would fail until they leave the step, so no XLA switch is advised;
2. a `compare` result saved in the log dir decides: its measured verdict
   is quoted, and `jit_compile=True` is advised only when it pays;
3. otherwise the advice is to measure first with `compare`, with the CPU
   caveat and its measured figures.

Auto-clustering already on is said where it matters (it compiles the ops
around a blocker; `jit_compile=True` would still fail). Pure: no
TensorFlow, no Keras.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keras_xla_guard.comparison.report import model_description
from keras_xla_guard.diagnose.verdict import INFO, MODEL, WARNING, Verdict

__all__ = [
    "CPU_EVIDENCE",
    "MOBILENET_RESULT",
    "MOBILENET_STEP_MS",
    "SEQUENCE_RESULT",
    "SEQUENCE_RUN_S",
    "KERAS_SWITCH",
    "JitEvidence",
    "blocked_verdict",
    "jit_off_verdict",
    "measure_first",
    "measure_first_fix",
    "switch_fix",
]

# The measured CPU slowdowns the advice cites, each with the saved result of
# the benchmark script that measured it (tests check the figures against it).
# bench_jit_cpu.py: median step times of alternated blocks, milliseconds.
MOBILENET_RESULT = "benchmarks/results/bench_jit_cpu-20261204T235052Z.json"
MOBILENET_STEP_MS = {"jit_compile": 1045.0, "plain": 132.0}
# bench_compare.py, case xla_does_not_pay: median full runs, seconds.
SEQUENCE_RESULT = "benchmarks/results/bench_compare-20261203T162056Z.json"
SEQUENCE_RUN_S = {"jit_compile": 33.7, "plain": 6.1}
CPU_EVIDENCE = (
    f"on a 2-core CPU, MobileNetV2 (alpha 0.35, 96x96 inputs, batch 16) took {MOBILENET_STEP_MS['jit_compile']:.0f} "
    f"ms per training step with jit_compile=True against {MOBILENET_STEP_MS['plain']:.0f} ms plain "
    f"({MOBILENET_RESULT}), and a sequence model with 16 batch shapes ran {SEQUENCE_RUN_S['jit_compile']:.1f} s "
    f"against {SEQUENCE_RUN_S['plain']:.1f} s plain ({SEQUENCE_RESULT})"
)
# How a Keras model switches XLA on; a custom loop's step passes its own.
KERAS_SWITCH = "model.compile(optimizer, loss, jit_compile=True)"


def measure_first_fix(switch: str = KERAS_SWITCH, header: bool = True) -> str:
    """A fix that measures before it switches XLA on.

    Its code lines carry their own comments: a report note
    (`Verdict.as_note`) keeps code lines only.

    Args:
        switch: The line that switches XLA on. Defaults to `KERAS_SWITCH`.
        header: Start with a comment line saying why. Defaults to `True`.

    Returns:
        The fix's code.
    """
    return (
        ("# Measure whether XLA pays for this model and data before switching it on:\n" if header else "")
        + "print(keras_xla_guard.compare(model, x, y).verdict)  # measure first; or: keras-xla-guard compare "
        "module:fn\n"
        f"{switch}  # only if compare says jit_compile pays"
    )


@dataclass(frozen=True)
class JitEvidence:
    """What a run knows about whether `jit_compile=True` would help, hurt or fail.

    Attributes:
        blockers: The step's ops without an XLA kernel, each as text
            naming the op type and where it is, e.g.
            `"EagerPyFunc in layer 'py_layer'"`; first seen first.
        autoclustering: Whether auto-clustering is on in the process
            (`tf.config.optimizer.get_jit()`).
        compare: The `compare` result saved in the log dir
            (`CompareReport.to_dict()`: `best_mode`, `verdict`, ...), or
            `None`.
        accelerator: Whether the step runs on a GPU or TPU (the CPU caveat
            does not apply there; measuring still does).
        device: The XLA device the blockers lack a kernel for, e.g.
            `"XLA_CPU_JIT"`.
    """

    blockers: tuple[str, ...] = ()
    autoclustering: bool = False
    compare: Mapping[str, Any] | None = None
    accelerator: bool = False
    device: str = "XLA_CPU_JIT"


def _compare_measured(compare: Mapping[str, Any]) -> str:
    """Where a saved `compare` verdict comes from, naming the model it measured when it recorded one.

    The callback, and the loop guard given its model, check that model is
    the one trained (`same_model`); a loop guard without one and `doctor
    --trace` have no model to check it against: the name lets the reader
    see whether the result applies.
    """
    recorded = compare.get("model")
    if not isinstance(recorded, Mapping):
        return "compare measured in this log dir"
    return f"compare measured {model_description(recorded)} in this log dir"


def measure_first(accelerator: bool = False) -> str:
    """The hedge every unmeasured XLA advice carries, with the measured figures.

    Args:
        accelerator: Whether the step runs on a GPU or TPU. Defaults to
            `False` (a CPU: the measured CPU slowdowns are cited).

    Returns:
        One sentence.
    """
    if accelerator:
        return (
            "Whether XLA pays here is not measured: measure it with keras_xla_guard.compare(model, x, y) "
            "first (it projects the planned run in both modes, compile time included)"
        )
    return (
        "Whether XLA pays here is not measured, and on a CPU it often does not: "
        f"{CPU_EVIDENCE}. Measure it with keras_xla_guard.compare(model, x, y) first"
    )


def switch_fix(evidence: JitEvidence | None = None, switch: str = KERAS_SWITCH) -> str:
    """The fix of a finding that XLA is off, as the evidence supports it (with its reasons as comments).

    Args:
        evidence: What the run knows. Defaults to `None`: nothing.
        switch: The line that switches XLA on. Defaults to `KERAS_SWITCH`.

    Returns:
        Moving the blockers out when there are any; the switch when a saved
        `compare` found it pays, nothing when it found it does not;
        otherwise `measure_first` (as comments) and `measure_first_fix`.
    """
    evidence = evidence or JitEvidence()
    blocked = blocked_verdict(evidence, switch)
    if blocked is not None:
        return f"# {evidence.blockers[0]} and the like block XLA first.\n{blocked.fix}"
    compare = evidence.compare
    if compare is not None:
        measured = str(compare.get("verdict") or "").rstrip(".")
        if compare.get("best_mode") == "jit_compile":
            return f"# {_compare_measured(compare)}: {measured}\n{switch}"
        return f"# {_compare_measured(compare)} that jit_compile does not pay here: {measured}"
    hedge = textwrap.wrap(
        measure_first(evidence.accelerator) + ".", 96, break_on_hyphens=False, break_long_words=False
    )
    return "\n".join(f"# {line}" for line in hedge) + "\n" + measure_first_fix(switch, header=False)


def blocked_verdict(evidence: JitEvidence, switch: str = KERAS_SWITCH) -> Verdict | None:
    """`JIT_COMPILE_BLOCKED` when the step holds ops XLA cannot compile, else `None`.

    Args:
        evidence: The run's evidence.
        switch: The line that would switch XLA on for this step. Defaults
            to `KERAS_SWITCH`.

    Returns:
        A warning naming the blockers (and that auto-clustering is on,
        when it is), whose fix moves them out of the step.
    """
    if not evidence.blockers:
        return None
    ops = "; ".join(evidence.blockers)
    fails = (
        "model.compile(jit_compile=True) would fail in Keras"
        if switch == KERAS_SWITCH
        else "jit_compile=True on the train step would fail"
    )
    around = (
        " Auto-clustering is on (tf.config.optimizer.get_jit()): XLA compiles the ops around them, and "
        "these run as plain TF ops."
        if evidence.autoclustering
        else ""
    )
    return Verdict(
        "JIT_COMPILE_BLOCKED",
        MODEL,
        WARNING,
        f"The train step runs ops without an XLA kernel on {evidence.device}: {ops}. "
        f"{fails} because of them.{around}",
        "# Move these ops out of the compiled step first: into the input pipeline (dataset.map),\n"
        "# or rewrite them with TensorFlow ops XLA supports (keras_xla_guard.explain names each one).",
    )


def jit_off_verdict(evidence: JitEvidence, what: str, switch: str = KERAS_SWITCH) -> Verdict:
    """The verdict for a step XLA does not compile, with advice the evidence supports.

    Args:
        evidence: The run's evidence.
        what: The fact, one sentence, e.g. `"XLA is not requested for
            this model: model.jit_compile is False."`.
        switch: The line that switches XLA on for this step. Defaults to
            `KERAS_SWITCH`.

    Returns:
        `JIT_COMPILE_BLOCKED` when there are blockers (no XLA switch
        advised); else `JIT_COMPILE_OFF` quoting the saved `compare`
        verdict (a fix only when it found `jit_compile` pays), or hedged
        with `measure_first`.
    """
    blocked = blocked_verdict(evidence, switch)
    if blocked is not None:
        return Verdict(blocked.code, blocked.layer, blocked.status, f"{what} {blocked.message}", blocked.fix)
    compare = evidence.compare
    if compare is not None:
        measured = str(compare.get("verdict") or "").rstrip(".")
        if compare.get("best_mode") == "jit_compile":
            return Verdict(
                "JIT_COMPILE_OFF",
                MODEL,
                WARNING,
                f"{what} {_compare_measured(compare)} that XLA pays: {measured}.",
                f"{switch}  # compare measured that it pays",
            )
        return Verdict(
            "JIT_COMPILE_OFF",
            MODEL,
            INFO,
            f"{what} {_compare_measured(compare)} that jit_compile does not pay here: {measured}. "
            "Keep it off.",
        )
    return Verdict(
        "JIT_COMPILE_OFF",
        MODEL,
        WARNING,
        f"{what} {measure_first(evidence.accelerator)}.",
        measure_first_fix(switch),
    )
