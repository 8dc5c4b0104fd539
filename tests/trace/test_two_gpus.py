"""A second GPU running the same kernels doubles every summed device figure:
the per-plane totals add up across device planes, never overwrite, and each
device keeps its own figures, the totals saying they add two.

The traces are `tests/_gpu_trace.py`'s builders with their GPU plane copied
as `/device:GPU:1`; the one-GPU report of the same builder is the oracle."""

from __future__ import annotations

import dataclasses

import pytest
from _gpu_trace import collective_fit, command_buffer_fit, jit_fit

from keras_xla_guard import analyze_trace

_SUMMED = (
    "xla_time_s",
    "xla_run_span_s",
    "xla_executions",
    "non_xla_op_time_s",
    "transfer_time_s",
    "collective_time_s",
)


def _reports(make, tmp_path):
    one = analyze_trace(make(6).write(tmp_path / "one.xplane.pb"))
    trace = make(6)
    second = trace.space.planes.add()
    second.CopyFrom(trace.gpu.plane)
    second.name, second.id = "/device:GPU:1", 2
    return one, analyze_trace(trace.write(tmp_path / "two.xplane.pb"))


@pytest.mark.parametrize("make", [jit_fit, collective_fit, command_buffer_fit], ids=lambda f: f.__name__)
def test_two_gpus_double_the_summed_figures_programs_and_ops(make, tmp_path):
    """Time, launches, op time, transfers, collectives, program runs and XLA op rows: twice one GPU's."""
    one, two = _reports(make, tmp_path)
    for name in _SUMMED:
        assert getattr(two, name) == pytest.approx(2 * getattr(one, name), rel=1e-12), name
    assert [(p.program, p.runs, p.per_op) for p in two.programs] == [
        (p.program, 2 * p.runs, p.per_op) for p in one.programs
    ]
    assert [p.time_s for p in two.programs] == pytest.approx([2 * p.time_s for p in one.programs], rel=1e-12)
    assert [(o.op_name, o.count) for o in two.top_xla_ops] == [
        (o.op_name, 2 * o.count) for o in one.top_xla_ops
    ]
    assert [o.self_time_s for o in two.top_xla_ops] == pytest.approx(
        [2 * o.self_time_s for o in one.top_xla_ops], rel=1e-12
    )


@pytest.mark.parametrize("make", [jit_fit, collective_fit, command_buffer_fit], ids=lambda f: f.__name__)
def test_two_gpus_double_each_steps_launches_and_transfers_but_not_its_busy_time(make, tmp_path):
    """Per step: launches and transfers twice; busy time the same, the two runs overlapping exactly."""
    one, two = _reports(make, tmp_path)
    assert [(s.step, s.wall_s, s.busy_s, s.launches) for s in two.steps] == [
        (s.step, s.wall_s, s.busy_s, 2 * s.launches) for s in one.steps
    ]
    assert [s.transfer_s for s in two.steps] == pytest.approx(
        [2 * s.transfer_s for s in one.steps], rel=1e-12
    )


def test_two_gpus_count_twice_the_collective_and_graph_kernels_in_quality_entries(tmp_path):
    """The collectives entry and the command buffer entry report both planes' kernels and time."""
    _, collectives = _reports(collective_fit, tmp_path)
    assert [q.detail for q in collectives.trace_quality] == [
        "24 collective kernel(s) ran 1.200 ms on the device, 0.840 ms of it while other streams ran other kernels"
    ]
    _, graphs = _reports(command_buffer_fit, tmp_path)
    assert [q.detail for q in graphs.trace_quality] == [
        "36 kernel(s), 1.440 ms of device time, ran inside CUDA graphs (XLA command buffers) in "
        "a_inference_one_step_on_data_812__.37(37)"
    ]


@pytest.mark.parametrize("make", [jit_fit, collective_fit, command_buffer_fit], ids=lambda f: f.__name__)
def test_each_gpu_has_its_own_figures_and_the_totals_say_they_add_two(make, tmp_path):
    """Per device: one GPU's XLA time, run span, plain ops, share, launches, transfers and collectives;
    the totals are labelled "summed over 2 devices" and the overall share is the sums' share."""
    one, two = _reports(make, tmp_path)
    (single,) = one.devices
    assert one.totals_label is None
    assert [d.device for d in two.devices] == ["/device:GPU:0", "/device:GPU:1"]
    for device in two.devices:
        assert dataclasses.replace(device, device="/device:GPU:0", host="one") == single
    assert single.xla_time_s == one.xla_time_s and single.launches == one.xla_executions
    assert two.totals_label == "summed over 2 devices"
    xla, op = sum(d.xla_time_s for d in two.devices), sum(d.non_xla_op_time_s for d in two.devices)
    assert two.xla_time_fraction == pytest.approx(xla / (xla + op), rel=1e-12)
    assert two.to_dict()["totals"] == "summed over 2 devices"


def test_two_hosts_planes_in_one_session_are_each_devices_with_their_host(tmp_path):
    """One run directory with a trace per host, each with a GPU: the combined report lists each device
    with its host and labels its totals "summed over 2 devices on 2 hosts"."""
    from keras_xla_guard import analyze_trace as analyze

    run = tmp_path / "logs" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    for host in ("worker-a", "worker-b"):
        jit_fit(6).write(run / f"{host}.xplane.pb")
    one = analyze_trace(jit_fit(6).write(tmp_path / "one.xplane.pb"))
    combined = analyze(tmp_path / "logs")
    assert [(d.host, d.device) for d in combined.devices] == [
        ("worker-a", "/device:GPU:0"),
        ("worker-b", "/device:GPU:0"),
    ]
    assert combined.totals_label == "summed over 2 devices on 2 hosts"
    assert combined.xla_time_s == pytest.approx(2 * one.xla_time_s, rel=1e-12)
    assert combined.xla_run_span_s == pytest.approx(2 * one.xla_run_span_s, rel=1e-12)
    assert "summed over 2 devices on 2 hosts" in str(combined).splitlines()[0]
    assert "worker-a/device:GPU:0" in str(combined)


def test_one_host_trace_of_two_hosts_is_summed_over_hosts(tmp_path):
    """Host traces of two hosts combined: "summed over 2 hosts", no devices."""
    from keras_xla_guard import CoverageReport, combine_reports

    a = CoverageReport(hosts=("a",), xla_time_s=1.0, non_xla_op_time_s=1.0, xla_time_fraction=0.5)
    b = CoverageReport(hosts=("b",), xla_time_s=1.0, non_xla_op_time_s=1.0, xla_time_fraction=0.5)
    assert (a.totals_label, combine_reports([a, b]).totals_label) == (None, "summed over 2 hosts")


def test_the_guards_own_kernels_are_in_no_devices_share(tmp_path):
    """A guard tap kernel on GPU:0 is guard time: out of that device's plain ops and share, as out of the
    totals'; the devices' plain ops still add up to the report's."""
    from _helpers import assert_consistent

    def two_gpus(guard: bool):
        trace = jit_fit(2)
        second = trace.space.planes.add()
        second.CopyFrom(trace.gpu.plane)
        second.name, second.id = "/device:GPU:1", 2
        if guard:
            tap = "xla_guard_tap/ResourceScatterUpdate:ResourceScatterUpdate"
            trace.tf_kernel(7, "scatter", 1, 500, 30, tf_op=tap)
        return analyze_trace(trace.write(tmp_path / f"{guard}.xplane.pb"))

    plain, guarded = two_gpus(False), two_gpus(True)
    assert guarded.guard_op_time_s == pytest.approx(30e-6)
    assert [d.non_xla_op_time_s for d in guarded.devices] == [d.non_xla_op_time_s for d in plain.devices]
    assert [d.xla_time_fraction for d in guarded.devices] == [d.xla_time_fraction for d in plain.devices]
    assert_consistent(guarded)
