"""Advice on XLA's switches: blockers first, a saved compare decides, else measure first with measured figures."""

from __future__ import annotations

import json
from pathlib import Path

from keras_xla_guard.diagnose.advice import (
    CPU_EVIDENCE,
    MOBILENET_RESULT,
    MOBILENET_STEP_MS,
    SEQUENCE_RESULT,
    SEQUENCE_RUN_S,
    JitEvidence,
    blocked_verdict,
    jit_off_verdict,
    measure_first,
    switch_fix,
)

REPO = Path(__file__).resolve().parents[2]
WHAT = "XLA is not requested for this model: model.jit_compile is False."
# A compare result as `CompareReport.to_dict()` holds it (the keys advice reads).
JIT_PAYS = {"best_mode": "jit_compile", "verdict": "jit_compile pays after 91 steps: 1.4x faster per step."}
PLAIN_WINS = {"best_mode": "plain", "verdict": "plain is faster: jit_compile never pays in 96 steps."}


def _advises_jit(text: str) -> bool:
    """Whether a text tells the user to switch jit_compile on (rather than that it would fail)."""
    return "jit_compile=True" in text and "would fail" not in text


def test_the_cited_cpu_figures_are_the_saved_benchmark_results() -> None:
    """Every figure of the CPU caveat is its benchmark's saved median, rounded as shown."""
    mobilenet = json.loads((REPO / MOBILENET_RESULT).read_text())["result"]
    assert {m: round(1e3 * s) for m, s in mobilenet["step_time_s"].items()} == {
        m: round(ms) for m, ms in MOBILENET_STEP_MS.items()
    }
    assert MOBILENET_STEP_MS["jit_compile"] > MOBILENET_STEP_MS["plain"]
    assert "MobileNetV2(alpha=0.35, input 96x96x3" in mobilenet["model"] and mobilenet["batch_size"] == 16
    sequence = next(
        c
        for c in json.loads((REPO / SEQUENCE_RESULT).read_text())["result"]["cases"]
        if c["case"] == "xla_does_not_pay"
    )
    assert {m: round(s, 1) for m, s in sequence["full_run_s_median"].items()} == SEQUENCE_RUN_S
    assert (
        f"took {MOBILENET_STEP_MS['jit_compile']:.0f} ms per training step with jit_compile=True against "
        f"{MOBILENET_STEP_MS['plain']:.0f} ms plain ({MOBILENET_RESULT})"
    ) in CPU_EVIDENCE


def test_blockers_come_instead_of_any_switch_and_say_auto_clustering_is_on() -> None:
    """Ops without an XLA kernel: JIT_COMPILE_BLOCKED names them, says jit_compile would fail, advises no switch."""
    evidence = JitEvidence(
        blockers=("EagerPyFunc in layer 'py_layer'", "StringFormat in layer 'text'"), autoclustering=True
    )
    verdict = jit_off_verdict(evidence, WHAT)
    assert (verdict.code, verdict.status) == ("JIT_COMPILE_BLOCKED", "warning")
    assert verdict.message == (
        f"{WHAT} The train step runs ops without an XLA kernel on XLA_CPU_JIT: EagerPyFunc in layer "
        "'py_layer'; StringFormat in layer 'text'. model.compile(jit_compile=True) would fail in Keras because "
        "of them. Auto-clustering is on (tf.config.optimizer.get_jit()): XLA compiles the ops around them, "
        "and these run as plain TF ops."
    )
    assert not _advises_jit(verdict.as_note()) and not _advises_jit(verdict.fix)
    assert "input pipeline (dataset.map)" in verdict.fix
    assert "Auto-clustering" not in blocked_verdict(JitEvidence(blockers=("EagerPyFunc",))).message
    assert blocked_verdict(JitEvidence()) is None


def test_a_saved_compare_decides() -> None:
    """compare found jit_compile pays: the switch, quoted; it did not: keep it off, no fix."""
    pays = jit_off_verdict(JitEvidence(compare=JIT_PAYS), WHAT)
    assert (pays.code, pays.status) == ("JIT_COMPILE_OFF", "warning")
    assert (
        pays.message == f"{WHAT} compare measured in this log dir that XLA pays: {JIT_PAYS['verdict'][:-1]}."
    )
    assert pays.fix == "model.compile(optimizer, loss, jit_compile=True)  # compare measured that it pays"
    # A result that recorded its model names it (the loop guard cannot check it is the run's).
    named = {**JIT_PAYS, "model": {"class": "Sequential", "name": "mlp", "params": 1234}}
    assert jit_off_verdict(JitEvidence(compare=named), WHAT).message == (
        f"{WHAT} compare measured Sequential 'mlp' (1,234 parameters) in this log dir that XLA pays: "
        f"{JIT_PAYS['verdict'][:-1]}."
    )
    assert switch_fix(JitEvidence(compare=named)) == (
        f"# compare measured Sequential 'mlp' (1,234 parameters) in this log dir: {JIT_PAYS['verdict'][:-1]}\n"
        "model.compile(optimizer, loss, jit_compile=True)"
    )
    loses = jit_off_verdict(JitEvidence(compare=PLAIN_WINS), WHAT)
    assert (loses.status, loses.fix) == ("info", "")
    assert loses.message.endswith(
        "does not pay here: plain is faster: jit_compile never pays in 96 steps. Keep it off."
    )


def test_without_evidence_the_advice_is_to_measure_first_with_the_cpu_figures() -> None:
    """No blocker, no compare: the note names compare before the switch, with the measured CPU slowdowns."""
    verdict = jit_off_verdict(JitEvidence(), WHAT)
    assert verdict.message == f"{WHAT} {measure_first()}."
    assert CPU_EVIDENCE in verdict.message
    note = verdict.as_note()
    assert note.index("keras_xla_guard.compare(model, x, y)") < note.index(
        "jit_compile=True)  # only if compare"
    )
    on_gpu = jit_off_verdict(JitEvidence(accelerator=True), WHAT)
    assert (
        CPU_EVIDENCE not in on_gpu.message and "keras_xla_guard.compare(model, x, y) first" in on_gpu.message
    )


def test_a_loop_steps_switch_is_its_own_line() -> None:
    """For a custom loop the switch and the failure name the train step, not model.compile."""
    switch = "train_step = tf.function(train_step, jit_compile=True)"
    assert jit_off_verdict(JitEvidence(), WHAT, switch).fix.endswith(
        f"{switch}  # only if compare says jit_compile pays"
    )
    blocked = blocked_verdict(JitEvidence(blockers=("EagerPyFunc",)), switch)
    assert "jit_compile=True on the train step would fail because of them" in blocked.message


def test_switch_fix_follows_the_same_evidence() -> None:
    """doctor's fix: blockers out first; the compare's switch or none; else the hedge as comments, then measuring."""
    assert switch_fix(JitEvidence(blockers=("EagerPyFunc in layer 'p'",))).startswith(
        "# EagerPyFunc in layer 'p' and the like block XLA first.\n# Move these ops"
    )
    assert (
        switch_fix(JitEvidence(compare=JIT_PAYS)).splitlines()[-1]
        == "model.compile(optimizer, loss, jit_compile=True)"
    )
    assert not _advises_jit(switch_fix(JitEvidence(compare=PLAIN_WINS)))
    hedged = switch_fix()
    comments = " ".join(line[2:] for line in hedged.splitlines() if line.startswith("# "))
    assert f"{measure_first()}." in comments
    assert hedged.index("keras_xla_guard.compare(") < hedged.index("jit_compile=True)  # only if")
