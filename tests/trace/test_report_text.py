"""The plain-text report (`format_report`, `str(report)`): every line of it on
reports built by hand, so each figure it prints is known by construction."""

from __future__ import annotations

from keras_xla_guard import CoverageReport, Explanation, OpStat, format_report
from keras_xla_guard.trace._text import (
    JAX_COVERAGE_NOTE,
    _op_lines,
    compile_lines,
    jax_busy,
    quality_lines,
    step_lines,
)
from keras_xla_guard.trace.compiles import CompileRecord
from keras_xla_guard.trace.report import ProgramStat, StepStat, TraceQuality

# Two steps of 10 ms: 8 and 6 ms busy, the first with 0.5 ms of transfers.
_STEPS = (StepStat(0, 0.010, 0.008, 0.002, 1, 0.0005), StepStat(1, 0.010, 0.006, 0.004, 2))


def _device_report() -> CoverageReport:
    """A window with every section: 4 programs, 4 XLA ops, 3 plain ops, 9 compile rows."""
    rows = tuple(
        CompileRecord(f"p{i}", f"m{i}", 0.1 * i, 0.01 * (i + 1), step=i, signature=f"x: float32[{i},3]")
        for i in range(8)
    )
    return CoverageReport(
        epoch=2,
        steps_profiled=10,
        window_wall_s=1.5,
        time_base="device",
        xla_time_s=0.09,
        non_xla_op_time_s=0.01,
        xla_time_fraction=0.9,
        xla_executions=10,
        compilations=2,
        compile_time_s=0.25,
        compile_thread_time_s=0.5,
        input_pipeline_time_s=0.002,
        transfer_time_s=0.003,
        collective_time_s=0.004,
        guard_op_time_s=0.0005,
        programs=(
            ProgramStat("jit_step(1)", 10, 0.08),
            ProgramStat("jit_b(2)", 3, 0.006, per_op=False),
            ProgramStat("c(3)", 1, 0.003),
            ProgramStat("d(4)", 1, 0.001),
        ),
        top_xla_ops=(
            OpStat("fusion", "fusion.1", 0.05, 10),
            OpStat("dot", "dot.2", 0.02, 10),
            OpStat("copy", "copy.3", 0.01, 10),
            OpStat("add", "add.4", 0.001, 10),
        ),
        # The noise floor is 1% of 100 ms of op time: Cast (0.5 ms) is below it.
        top_non_xla_ops=(
            OpStat("MatMul", "dense/MatMul", 0.006, 5, layer="dense"),
            OpStat("AddV2", "add", 0.002, 5),
            OpStat("Cast", "cast", 0.0005, 5),
        ),
        distinct_signatures=3,
        new_signatures=2,
        expected_compilations=2,
        signature_explanations=(
            Explanation("dim_varied", "first finding"),
            Explanation("short_last_batch", "second finding"),
            Explanation("bucketing_fix", "third finding"),
        ),
        compile_table=(*rows, CompileRecord("late")),
        cache_hits=1,
        persistent_cache="/tmp/cache",
        trace_quality=(TraceQuality("events_dropped", "12 events dropped", "figures low", "raise the caps"),),
        notes=("first note", "second note"),
    )


_DEVICE_HEAD = """\
XLA coverage (epoch 2, 10 steps, 1500.0 ms wall): 90.0% of op time ran inside XLA
  XLA executables:        90.0 ms  (10 launches)
       80.0 ms  x10    program jit_step(1)
        6.0 ms  x3     program jit_b(2)  (command buffers: not per op)
        3.0 ms  x1     program c(3)
    ... 1 more program(s)
  plain TF ops:           10.0 ms
  XLA compilations:          2     (250.0 ms wall-clock, 500.0 ms summed over threads)
  input pipeline:          2.0 ms
  device transfers:        3.0 ms  (memcpy/memset, not counted)
  collectives:             4.0 ms  (XLA time inside programs, not counted outside)
  guard's own ops:         0.5 ms  (signature tap, not counted)
  times measured on: device
  top ops inside XLA (device time):
       50.0 ms  x10    fusion               fusion.1
       20.0 ms  x10    dot                  dot.2
       10.0 ms  x10    copy                 copy.3
  top ops outside XLA (self time):
        6.0 ms  x5     MatMul               [dense] dense/MatMul
"""

_DEVICE_TAIL = """\
  input signatures:          3     (2 new, 2 expected compilation(s))
    first finding
    second finding
  compile table:     2 compiled, 1 cache hit(s), persistent cache /tmp/cache
    step    0     10.0 ms  p0                 x: float32[0,3]
    step    1     20.0 ms  p1                 x: float32[1,3]
    step    2     30.0 ms  p2                 x: float32[2,3]
    step    3     40.0 ms  p3                 x: float32[3,3]
    step    4     50.0 ms  p4                 x: float32[4,3]
    step    5     60.0 ms  p5                 x: float32[5,3]
    step    6     70.0 ms  p6                 x: float32[6,3]
    step    7     80.0 ms  p7                 x: float32[7,3]
    ... 1 more
  trace quality (what limits these figures):
    events_dropped: 12 events dropped
      cost: figures low
      for a diagnostic run: raise the caps
  note: first note
  note: second note"""


def test_a_device_report_prints_every_section_in_order():
    """Programs and XLA ops cut at max_programs, ops at the floor, 8 compile rows, quality, notes."""
    report = _device_report()
    assert format_report(report) == (
        _DEVICE_HEAD
        + "        2.0 ms  x5     AddV2                add\n"
        + "        2.0 ms         other plain ops (each below 1% of op time)\n"
        + _DEVICE_TAIL
    )
    assert str(report) == format_report(report)


def test_max_ops_cuts_the_findings_and_the_rest_is_other_without_the_floor_label():
    """max_ops=1 shows MatMul; the 4 ms rest holds a finding, so no 'below 1%' label."""
    assert format_report(_device_report(), max_ops=1) == (
        _DEVICE_HEAD + "        4.0 ms         other plain ops\n" + _DEVICE_TAIL
    )


def test_a_host_report_leaves_out_the_figures_it_does_not_have():
    """No epoch, steps, wall, device figures or thread time; no op above the floor; signatures off."""
    report = CoverageReport(
        non_xla_op_time_s=0.02,
        top_non_xla_ops=(OpStat("A", "a", 0.0001, 1),),
        compile_thread_time_s=None,
        signatures_unavailable="no tap",
    )
    assert format_report(report) == (
        "XLA coverage (trace): 0.0% of op time ran inside XLA\n"
        "  XLA executables:         0.0 ms  (0 launches)\n"
        "  plain TF ops:           20.0 ms\n"
        "  XLA compilations:          0     (0.0 ms wall-clock)\n"
        "  input pipeline:          0.0 ms\n"
        "  top ops outside XLA: none is a finding (20.000 ms of plain ops, each below 1% of op time)\n"
        "  input signatures:  unavailable (no tap)"
    )


def test_a_report_that_measured_nothing_is_one_line_with_its_reason():
    """status != ok: 'XLA coverage (epoch N): status - reason' and nothing else."""
    report = CoverageReport(status="skipped", reason="too short", epoch=1)
    assert format_report(report) == "XLA coverage (epoch 1): skipped - too short"


def test_a_jax_window_leads_with_the_busy_share_over_its_steps():
    """14 of 20 ms busy over two steps, 1 ms compiling: 70.0%, 5.00 ms of host time; the JAX note first."""
    report = CoverageReport(
        backend="jax",
        epoch=0,
        steps_profiled=2,
        window_wall_s=0.02,
        xla_time_s=0.014,
        xla_executions=3,
        compilations=1,
        compile_time_s=0.001,
        compile_thread_time_s=None,
        transfer_time_s=0.0002,
        steps=_STEPS,
        distinct_signatures=1,
        new_signatures=1,
        signature_explanations=(Explanation("a", "one"), Explanation("b", "two"), Explanation("c", "three")),
        compile_table=(CompileRecord("jit_step", step=0, compile_s=0.001),),
        notes=("n",),
    )
    assert format_report(report) == (
        "JAX window (epoch 0, 2 steps, 20.0 ms wall): XLA programs kept the device 70.0% busy over its "
        "steps (host 5.00 ms between programs, compiles aside)\n"
        "  program launches:          3\n"
        "  XLA compilations:          1     (1.0 ms wall-clock)\n"
        "  device transfers:        0.2 ms\n"
        "  per step:          wall       busy   host gap  launches\n"
        "    step    0    10.00 ms    8.00 ms    2.00 ms         1  transfers 0.50 ms\n"
        "    step    1    10.00 ms    6.00 ms    4.00 ms         2\n"
        "  input signatures:          1     (1 new)\n"
        "    one\n"
        "    two\n"
        "  compile table:     1 compiled\n"
        "    step    0      1.0 ms  jit_step\n"
        f"  note: {JAX_COVERAGE_NOTE}\n"
        "  note: n"
    )


def test_a_jax_window_without_steps_measures_over_the_window_capped_at_its_wall():
    """No steps: programs over the wall (50 of 100 ms; 200 ms caps at 100%); no wall: the program time."""
    half = CoverageReport(
        backend="jax", window_wall_s=0.1, xla_time_s=0.05, compile_time_s=0.01, signatures_unavailable="off"
    )
    thread = "(10.0 ms wall-clock, 0.0 ms summed over threads)"
    assert format_report(half).splitlines() == [
        "JAX window (trace, 100.0 ms wall): XLA programs kept the device 50.0% busy over the window "
        "(host 40.00 ms between programs, compiles aside)",
        "  program launches:          0",
        f"  XLA compilations:          0     {thread}",
        "  input signatures:  unavailable (off)",
        f"  note: {JAX_COVERAGE_NOTE}",
    ]
    over = CoverageReport(backend="jax", window_wall_s=0.1, xla_time_s=0.2, compile_time_s=0.01)
    assert format_report(over).splitlines()[0] == (
        "JAX window (trace, 100.0 ms wall): XLA programs kept the device 100.0% busy over the window "
        "(host 0.00 ms between programs, compiles aside)"
    )
    no_wall = CoverageReport(backend="jax", xla_time_s=0.05)
    assert format_report(no_wall).splitlines()[0] == "JAX window (trace): XLA programs ran 50.00 ms"


def test_compile_lines_show_unknown_steps_cache_hits_and_rows_past_the_cut():
    """step None is '?', a hit says 'cache hit' with '-' for no program; 3 rows at max_rows=2: '... 1 more'."""
    rows = (
        CompileRecord("p", step=None, compile_s=0.0123),
        CompileRecord("", cache_hit=True, step=3, signature="x: f[2]"),
        CompileRecord("q", step=12),
    )
    assert compile_lines(
        CoverageReport(compilations=2, compile_table=rows, persistent_cache=""), max_rows=2
    ) == [
        "  compile table:     2 compiled",
        "    step    ?     12.3 ms  p",
        "    step    3   cache hit  -                  x: f[2]",
        "    ... 1 more",
    ]


def test_compile_lines_need_a_row_or_a_persistent_cache_setting():
    """Nothing compiled and no cache setting: no lines; a cache set (even empty) gives the headline."""
    assert compile_lines(CoverageReport()) == []
    assert compile_lines(CoverageReport(persistent_cache="")) == ["  compile table:     0 compiled"]
    assert compile_lines(CoverageReport(persistent_cache="/c", cache_hits=0)) == [
        "  compile table:     0 compiled, 0 cache hit(s), persistent cache /c"
    ]


def test_step_lines_list_five_steps_then_how_many_more():
    """6 steps: a header, 5 rows (transfers where measured), then '... 1 more step(s)'; none without steps."""
    lines = step_lines(CoverageReport(steps=_STEPS * 3))
    assert lines[0] == "  per step:          wall       busy   host gap  launches"
    assert lines[1:3] == [
        "    step    0    10.00 ms    8.00 ms    2.00 ms         1  transfers 0.50 ms",
        "    step    1    10.00 ms    6.00 ms    4.00 ms         2",
    ]
    assert (len(lines), lines[-1]) == (7, "    ... 1 more step(s)")
    assert step_lines(CoverageReport(steps=_STEPS), max_rows=1)[-1] == "    ... 1 more step(s)"
    assert step_lines(CoverageReport()) == []


def test_quality_lines_are_empty_for_a_clean_trace():
    """No trace-quality entry: no lines (the header only comes with an entry)."""
    assert quality_lines(CoverageReport()) == []


def test_tables_exactly_at_their_cut_have_no_more_line():
    """3 programs at max_programs=3 and 8 compile rows at max_rows=8: no '... more' line."""
    programs = tuple(ProgramStat(f"p({i})", 1, 0.001 * (3 - i)) for i in range(3))
    rows = tuple(CompileRecord(f"c{i}", step=i) for i in range(8))
    lines = format_report(CoverageReport(programs=programs, compile_table=rows, compilations=8)).splitlines()
    assert [line for line in lines if "more" in line] == []
    # A compiled row without a compile time shows 0.0 ms.
    assert lines[-1] == "    step    7      0.0 ms  c7"


def test_six_findings_show_five_by_default_and_a_table_of_only_findings_has_no_floor_label():
    """Default max_ops is 5; the rest beside shown findings is 'other' without the floor label; no rest, no line."""
    ops = tuple(OpStat("Op", f"op{i}", 0.001, 1) for i in range(6))
    lines = format_report(CoverageReport(non_xla_op_time_s=0.0065, top_non_xla_ops=ops)).splitlines()
    start = lines.index("  top ops outside XLA (self time):")
    assert [line.split()[-1] for line in lines[start + 1 : start + 6]] == ["op0", "op1", "op2", "op3", "op4"]
    assert lines[start + 6] == "        1.5 ms         other plain ops"
    every = format_report(CoverageReport(non_xla_op_time_s=0.0025, top_non_xla_ops=ops[:2])).splitlines()
    assert every[-1] == "        0.5 ms         other plain ops"
    exact = format_report(CoverageReport(non_xla_op_time_s=0.002, top_non_xla_ops=ops[:2])).splitlines()
    assert exact[-1] == "        1.0 ms  x1     Op                   op1"


def test_missing_op_times_count_as_zero_for_the_floor():
    """xla_time_s and non_xla_op_time_s None: the floor is 0, so every op is a finding and nothing is 'other'."""
    report = CoverageReport(
        xla_time_s=None, non_xla_op_time_s=None, top_non_xla_ops=(OpStat("A", "a", 0.001, 2),)
    )
    assert _op_lines(report, 5) == [
        "  top ops outside XLA (self time):",
        "        1.0 ms  x2     A                    a",
    ]


def test_signatures_without_expected_compilations_say_only_how_many_are_new():
    """expected_compilations None: '(2 new)' and nothing more."""
    report = CoverageReport(distinct_signatures=3, new_signatures=2)
    assert "  input signatures:          3     (2 new)" in format_report(report).splitlines()


def test_step_lines_at_exactly_max_rows_say_nothing_more():
    """5 steps and max_rows 5: a header and 5 rows, no '... 0 more' line."""
    lines = step_lines(CoverageReport(steps=(_STEPS * 3)[:5]))
    assert len(lines) == 6
    assert lines[-1] == "    step    0    10.00 ms    8.00 ms    2.00 ms         1  transfers 0.50 ms"


def test_jax_busy_without_steps_or_program_time_is_all_host_time():
    """No steps, no XLA time and no compile time over a 0.5 s window: busy share 0, host time the whole 0.5 s."""
    assert jax_busy(CoverageReport(window_wall_s=0.5, xla_time_s=0.0, compile_time_s=0.0)) == (0.0, 0.5)
    assert jax_busy(CoverageReport(window_wall_s=0.5, xla_time_s=0.25, compile_time_s=0.125)) == (0.5, 0.125)
    assert jax_busy(CoverageReport(window_wall_s=None, xla_time_s=0.25)) is None


def test_a_jax_window_on_several_devices_is_busy_by_their_mean_and_says_what_it_sums():
    """Two devices, 80 ms of XLA time over a 100 ms window, no steps: each device 40% busy on average
    (not 80%), the totals labelled as summed over the two, each device listed."""
    from keras_xla_guard.trace.report import DeviceStat

    devices = tuple(
        DeviceStat(f"/device:GPU:{i}", None, 0.04, 0.05, 0.0, 1.0, 3, 0.001, 0.0) for i in range(2)
    )
    report = CoverageReport(
        backend="jax",
        time_base="device",
        window_wall_s=0.1,
        xla_time_s=0.08,
        xla_run_span_s=0.1,
        transfer_time_s=0.002,
        xla_executions=6,
        devices=devices,
        signatures_unavailable="off",
    )
    lines = format_report(report).splitlines()
    assert lines[0] == (
        "JAX window (trace, 100.0 ms wall, summed over 2 devices): XLA programs kept the device 40.0% busy "
        "over the window (host 60.00 ms between programs, compiles aside)"
    )
    assert (
        "  XLA run spans:         100.0 ms  (first to last kernel of each run, idle gaps included; not counted)"
        in lines
    )
    assert [line for line in lines if line.startswith("    /device:GPU:")] == [
        f"    /device:GPU:{i}      100.0%    40.00 ms   50.00 ms     0.00 ms         3     1.00 ms"
        for i in range(2)
    ]
