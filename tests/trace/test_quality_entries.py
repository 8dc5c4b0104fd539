"""`device_quality` on device totals and host launches built by hand: every
entry whole (code, detail with its figures, cost, remedy), in its fixed order."""

from __future__ import annotations

from keras_xla_guard.trace import _quality as q
from keras_xla_guard.trace._device import DeviceTotals
from keras_xla_guard.trace._host_launches import HostLaunches
from keras_xla_guard.trace.report import TraceQuality

_MS = 1_000_000_000  # picoseconds


def _totals(**figures: object) -> DeviceTotals:
    totals = DeviceTotals()
    for name, value in figures.items():
        setattr(totals, name, value)
    return totals


def test_every_condition_gives_its_entry_in_the_fixed_order():
    """Graphs, op-by-op command buffers, no step marker, kernels no execution holds, collectives, missing
    events: six whole entries."""
    device = _totals(
        graph_kernels=4,
        graph_ps=3 * _MS,
        graph_programs={"d(4)", "a(1)", "c(3)", "b(2)"},
        unattributed_kernels=7,
        xla_kernels=9,
        collective_kernels=2,
        collective_ps=5 * _MS,
        collective_overlap_ps=_MS // 2,
        correlations={1, 2},
    )
    # Launches 3 and 4 have no device event; 4 comes after the last one seen (2, at 20).
    host = HostLaunches({}, [], [(1, 10), (3, 15), (2, 20), (4, 30)], {})
    assert q.device_quality(device, host, True, steps_known=False) == [
        TraceQuality(
            "command_buffers",
            "4 kernel(s), 3.000 ms of device time, ran inside CUDA graphs (XLA command buffers) in "
            "a(1), b(2), c(3) and 1 more",
            q._COMMAND_BUFFER_COST,
            q._COMMAND_BUFFER_REMEDY,
        ),
        TraceQuality(
            "command_buffers_off_while_profiling",
            "XLA ran its command buffers op by op because the profiler was on (host event "
            "'WARNING: CommandBuffer disabled when profiling')",
            q._COMMAND_BUFFERS_OFF_COST,
            q._COMMAND_BUFFERS_OFF_REMEDY,
        ),
        TraceQuality(
            "no_step_markers",
            "the trace holds no step marker (a host event with both the _r and step_num stats); events with "
            "_r alone, such as TensorFlow's FunctionRun around every function call, group one function's "
            "execution and open no step",
            "steps are unknown: the report has no per-step figures (steps is null) and invents none; the "
            "window's totals do not depend on them",
            q._NO_STEPS_REMEDY,
        ),
        TraceQuality(
            "launches_unattributed",
            "7 of 9 XLA kernel(s) were launched by no driver call the host planes place inside an XLA program "
            "execution (a '<module>:XLA GPU module' event)",
            q._UNATTRIBUTED_COST,
            q._UNATTRIBUTED_REMEDY,
        ),
        TraceQuality(
            "collectives",
            "2 collective kernel(s) ran 5.000 ms on the device, 0.500 ms of it while other streams ran "
            "other kernels",
            q._COLLECTIVES_COST,
            q._COLLECTIVES_REMEDY,
        ),
        TraceQuality(
            "device_events_missing",
            "2 of the host's 4 kernel, copy and graph launches have no device event; the window's last 1 "
            "launch(es) are among them: the device plane ends early",
            q._MISSING_COST,
            q._MISSING_REMEDY,
        ),
    ]


def test_missing_events_before_the_last_seen_launch_do_not_say_the_plane_ends_early():
    """Only launch 1 (at 10) is missing and launch 2 (at 10, the same moment) was seen: no 'ends early' tail."""
    device = _totals(correlations={2, 3})
    host = HostLaunches({}, [], [(1, 10), (2, 10), (3, 5)], {})
    assert q.device_quality(device, host, False, steps_known=True) == [
        TraceQuality(
            "device_events_missing",
            "1 of the host's 3 kernel, copy and graph launches have no device event",
            q._MISSING_COST,
            q._MISSING_REMEDY,
        )
    ]


def test_when_no_launch_has_a_device_event_every_one_is_late():
    """No correlation seen at all: all launches are missing and all are after the last seen (none)."""
    host = HostLaunches({}, [], [(1, 0), (2, 4)], {})
    (entry,) = q.device_quality(_totals(), host, False, steps_known=True)
    assert entry.detail == (
        "2 of the host's 2 kernel, copy and graph launches have no device event; the window's last 2 "
        "launch(es) are among them: the device plane ends early"
    )


def test_a_clean_device_and_no_host_give_no_entry():
    """Nothing counted, no host launches (or no host at all): an empty list."""
    assert q.device_quality(_totals(), None, False, steps_known=True) == []
    assert q.device_quality(_totals(correlations={1}), HostLaunches({}, [], [(1, 3)], {}), False, True) == []
    assert q.device_quality(_totals(), HostLaunches({}, [], [], {}), False, steps_known=True) == []


def test_the_steps_remedy_names_every_way_to_mark_a_step():
    """Keras fit under the callback, XlaGuard.watch, TensorFlow's Trace with step_num and _r, JAX's annotation."""
    remedy = q.no_step_markers().remedy
    for way in (
        "XlaGuardCallback",
        "XlaGuard.watch",
        "tf.profiler.experimental.Trace('train', step_num=step, _r=1)",
        "jax.profiler.StepTraceAnnotation('train', step_num=step)",
    ):
        assert way in remedy


def test_three_names_are_listed_then_how_many_more():
    """_listed sorts, shows three and counts the rest."""
    assert q._listed(["c", "a", "b"]) == "a, b, c"
    assert q._listed(["e", "d", "c", "b", "a"]) == "a, b, c and 2 more"
