"""Tests for `keras_xla_guard.diagnose.doctor` and `keras-xla-guard doctor`.

Every scenario runs real TensorFlow; the effectiveness probe is a real child
process whose real profile is analyzed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keras_xla_guard.diagnose.doctor import doctor, parse_tf_xla_flags
from keras_xla_guard.diagnose.verdict import Verdict

_CPU_FLAG = "--tf_xla_cpu_global_jit"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "keras_xla_guard.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


@pytest.fixture
def clean_switches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No TF_XLA_FLAGS and auto-clustering off; the jit setting is restored after."""
    import tensorflow as tf

    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    before = tf.config.optimizer.get_jit()
    tf.config.optimizer.set_jit(False)
    yield
    tf.config.optimizer.set_jit(before or False)


def test_parse_tf_xla_flags_reads_auto_jit_and_cpu_flag() -> None:
    """TF_XLA_FLAGS parsing finds --tf_xla_auto_jit's value and the CPU flag, also =false."""
    assert parse_tf_xla_flags(None) == (None, False)
    assert parse_tf_xla_flags("--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit") == ("2", True)
    assert parse_tf_xla_flags("--tf_xla_cpu_global_jit=false --xla_foo=1") == (None, False)
    assert parse_tf_xla_flags("--tf_xla_auto_jit=single-gpu(2)") == ("single-gpu(2)", False)


def test_verdict_as_note_keeps_code_lines_of_the_fix() -> None:
    """A verdict as a note is one line with the code and the fix without comments."""
    verdict = Verdict("X_CODE", "switches", "warning", "Something.", "# why\nimport os\nrun()")
    assert verdict.as_note() == "X_CODE: Something. Fix: import os; run()"
    assert "\n" not in verdict.as_note()


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "10"])
def test_doctor_rejects_bad_probe_timeout(bad: object) -> None:
    """A non-positive, non-finite or non-numeric probe timeout is a ValueError quoting it."""
    with pytest.raises(ValueError, match="probe_timeout="):
        doctor(probe_timeout=bad)  # type: ignore[arg-type]  # why: the bad value is the test


@pytest.mark.slow
def test_nothing_requested(clean_switches: None) -> None:
    """With no switch set: backend OK, XLA not requested, Keras 'auto' is False, probe 0% XLA."""
    report = doctor()
    assert report.codes == (
        "XLA_BACKEND_OK",
        "XLA_NOT_REQUESTED",
        "JIT_COMPILE_AUTO_RESOLVES_FALSE",
        "ONEDNN_UNRELATED",
        "AUTOJIT_OFF",
    )
    assert report.get_jit == ""
    assert report.keras_auto_jit_compile is False
    assert report.device_checks and all(c.xla_ok for c in report.device_checks)
    assert report.probe is not None and report.probe.ran
    assert not report.probe.ran_under_xla
    assert report.probe.xla_executions == 0
    assert "MatMul" in " ".join(report.probe.plain_ops)
    assert "jit_compile=True" in report.verdict("XLA_NOT_REQUESTED").fix
    assert all(v.fix for v in report.problems)


@pytest.mark.slow
def test_set_jit_without_cpu_flag_is_measured_not_effective(clean_switches: None) -> None:
    """set_jit(True) without the CPU flag: requested, and the probe measures no XLA."""
    import tensorflow as tf

    tf.config.optimizer.set_jit(True)
    report = doctor(check_devices=False)
    assert report.get_jit == "autoclustering"
    assert report.tf_cpu_global_jit is False
    assert "AUTOJIT_REQUESTED" in report.codes
    assert "XLA_NOT_REQUESTED" not in report.codes
    verdict = report.verdict("AUTOJIT_NOT_EFFECTIVE_CPU_FLAG_MISSING")
    assert verdict is not None and verdict.status == "error"
    assert "measured: 0%" in verdict.message
    assert _CPU_FLAG in verdict.fix and "set_jit(True)" in verdict.fix
    # Auto-clustering on a CPU can be slower: the fix measures before it makes the request effective.
    assert verdict.fix.startswith(
        "# Whether auto-clustering pays on this CPU is not measured: measure it first\n"
    )
    assert report.probe is not None and report.probe.ran and not report.probe.ran_under_xla


@pytest.mark.slow
def test_cpu_flag_set_after_tensorflow_read_it(clean_switches: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU flag put in os.environ after TF read its flags is flagged, and the probe agrees."""
    import tensorflow as tf

    from keras_xla_guard.diagnose.doctor import _tf_cpu_global_jit

    assert _tf_cpu_global_jit() is False  # TF has read its flags by now
    monkeypatch.setenv("TF_XLA_FLAGS", _CPU_FLAG)
    tf.config.optimizer.set_jit(True)
    report = doctor(check_devices=False)
    assert report.env_cpu_global_jit is True
    assert report.tf_cpu_global_jit is False
    assert "CPU_FLAG_SET_TOO_LATE" in report.codes
    # The child sees the flag in its environment at import, yet is told
    # what this process holds, so it measures what this process would get.
    assert "AUTOJIT_NOT_EFFECTIVE_CPU_FLAG_MISSING" in report.codes
    assert report.probe is not None and not report.probe.ran_under_xla
    assert _tf_cpu_global_jit() is False


@pytest.mark.slow
def test_probe_reproduces_this_process_cpu_flag_and_set_jit(clean_switches: None) -> None:
    """With set_jit(True) and the CPU flag held by this process, the probe measures XLA."""
    import tensorflow as tf
    from tensorflow.python.client import pywrap_tf_session

    tf.config.optimizer.set_jit(True)
    old = pywrap_tf_session.TF_SetTfXlaCpuGlobalJit(True)
    try:
        report = doctor(check_devices=False, resolve_keras=False)
    finally:
        pywrap_tf_session.TF_SetTfXlaCpuGlobalJit(old)
    assert report.tf_cpu_global_jit is True and report.env_cpu_global_jit is False
    assert report.codes[-1] == "AUTOJIT_EFFECTIVE"
    assert report.probe is not None and report.probe.xla_executions == 3  # 3 probe calls, one cluster
    assert "CPU_FLAG_SET_TOO_LATE" not in report.codes


@pytest.mark.slow
def test_probe_skipped_still_predicts_missing_cpu_flag(clean_switches: None) -> None:
    """Without the probe, set_jit on CPU without the flag is still reported (as predicted)."""
    import tensorflow as tf

    tf.config.optimizer.set_jit(True)
    report = doctor(probe=False, check_devices=False, resolve_keras=False)
    assert report.probe is None
    assert report.keras_auto_jit_compile is None
    verdict = report.verdict("AUTOJIT_NOT_EFFECTIVE_CPU_FLAG_MISSING")
    assert verdict is not None and "probe was skipped" in verdict.message


@pytest.mark.slow
def test_probe_that_times_out_is_a_verdict_not_an_error(clean_switches: None) -> None:
    """A probe that cannot finish in time yields PROBE_FAILED with the reason."""
    report = doctor(check_devices=False, resolve_keras=False, probe_timeout=0.05)
    assert report.probe is not None and not report.probe.ran
    assert "did not finish within" in report.probe.error
    assert report.codes[-1] == "PROBE_FAILED"
    # Its fix is the child's own command line, and it runs: one JSON line out.
    fix = report.verdict("PROBE_FAILED").fix
    assert fix == f"{sys.executable} -m keras_xla_guard.diagnose.probe --jit autoclustering"
    proc = subprocess.run(shlex.split(fix), capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(json.loads(proc.stdout.splitlines()[-1])) == {
        "xla_time_fraction",
        "xla_executions",
        "compilations",
        "plain_ops",
    }


@pytest.mark.slow
def test_keras_configured_for_a_backend_that_cannot_start_is_named_not_called_missing(tmp_path: Path) -> None:
    """KERAS_BACKEND=torch without torch: Keras' version and 'torch' are reported, with KERAS_BACKEND_UNAVAILABLE.

    Keras on another backend that starts (numpy) gets KERAS_BACKEND_NOT_TENSORFLOW instead; a Keras that
    cannot start runs on no backend, so that verdict would contradict the first.
    """
    from importlib.metadata import version

    assert importlib.util.find_spec("torch") is None, "this test needs a venv without torch"
    env = dict(os.environ, KERAS_BACKEND="torch", KERAS_HOME=str(tmp_path))
    proc = _cli("doctor", "--json", "--no-probe", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert (data["keras_version"], data["keras_backend"]) == (version("keras"), "torch")
    verdicts = {v["code"]: v for v in data["verdicts"]}
    assert "KERAS_BACKEND_NOT_TENSORFLOW" not in verdicts
    assert verdicts["KERAS_BACKEND_UNAVAILABLE"]["message"] == (
        f"Keras {version('keras')} cannot start here: it is set to the 'torch' backend (KERAS_BACKEND), "
        "and importing Keras fails with ModuleNotFoundError: No module named 'torch'."
    )
    assert 'os.environ["KERAS_BACKEND"] = "tensorflow"' in verdicts["KERAS_BACKEND_UNAVAILABLE"]["fix"]
    # keras.json sets it the same way when the variable is unset, and the message names the file.
    env.pop("KERAS_BACKEND")
    (tmp_path / "keras.json").write_text('{"backend": "torch"}')
    data = json.loads(_cli("doctor", "--json", "--no-probe", env=env).stdout)
    assert data["keras_backend"] == "torch"
    (verdict,) = [v for v in data["verdicts"] if v["code"] == "KERAS_BACKEND_UNAVAILABLE"]
    assert f"the 'torch' backend ({tmp_path / 'keras.json'})" in verdict["message"]
    # A backend that starts: Keras runs on it, and TensorFlow's switches do not apply.
    env["KERAS_BACKEND"] = "numpy"
    data = json.loads(_cli("doctor", "--json", "--no-probe", env=env).stdout)
    verdicts = {v["code"]: v for v in data["verdicts"]}
    assert "KERAS_BACKEND_UNAVAILABLE" not in verdicts
    assert verdicts["KERAS_BACKEND_NOT_TENSORFLOW"]["message"] == (
        "Keras runs on backend='numpy'; TensorFlow's XLA switches do not apply."
    )


@pytest.mark.slow
def test_cli_doctor_json_with_cpu_flag_set_before_import() -> None:
    """`doctor --json` with the flags set at process start: auto-clustering measured effective."""
    flags = f"--tf_xla_auto_jit=2 {_CPU_FLAG}"
    env = dict(os.environ, TF_XLA_FLAGS=flags, TF_CPP_MIN_LOG_LEVEL="0")
    proc = _cli("doctor", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    codes = [v["code"] for v in data["verdicts"]]
    assert codes == [
        "XLA_BACKEND_OK",
        "AUTOJIT_REQUESTED",
        "JIT_COMPILE_AUTO_RESOLVES_FALSE",
        "ONEDNN_UNRELATED",
        "AUTOJIT_EFFECTIVE",
    ]
    assert data["env_auto_jit"] == "2"
    assert data["tf_cpu_global_jit"] is True
    probe = data["probe"]
    assert probe["ran_under_xla"] is True
    assert probe["xla_time_fraction"] > 0.5
    # The probe calls its step 3 times under the profiler; the step is one
    # connected cluster, so one cluster run per call.
    assert probe["xla_executions"] == 3
    assert any("Compiled cluster using XLA" in line for line in probe["log_lines"])
    assert probe["hidden_by_log_level"] is None
    assert data["seconds"] > 0  # measured, not bounded: a wall-time bound would test the machine
    assert_no_list_repeats(data)


def assert_no_list_repeats(value: Any, where: str = "report") -> None:
    """Every list in a doctor's JSON holds each item once (a repeat says nothing new)."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert_no_list_repeats(item, f"{where}.{key}")
    elif isinstance(value, list):
        keys = [json.dumps(item, sort_keys=True) for item in value]
        assert len(keys) == len(set(keys)), f"{where} repeats an item: {value}"
        for index, item in enumerate(value):
            assert_no_list_repeats(item, f"{where}[{index}]")


@pytest.mark.slow
def test_xla_devices_flag_on_a_cpu_is_why_keras_auto_resolves_true_and_the_fix_measures_first() -> None:
    """--tf_xla_enable_xla_devices on a CPU-only machine: Keras' "auto" turns True, named as the flag's doing."""
    data = _doctor_json(flags="--tf_xla_enable_xla_devices")
    verdicts = {v["code"]: v for v in data["verdicts"]}
    assert list(verdicts) == [
        "XLA_BACKEND_OK",
        "XLA_NOT_REQUESTED",
        "JIT_COMPILE_AUTO_RESOLVES_TRUE",
        "XLA_DEVICES_FLAG_SWITCHES_KERAS_AUTO",
        "ONEDNN_UNRELATED",
        "AUTOJIT_OFF",
    ]
    assert data["keras_auto_jit_compile"] is True
    # The flag's XLA_CPU device is no accelerator: the advice stays the CPU's.
    assert [d.split(":")[0] for d in data["physical_devices"]] == ["CPU", "XLA_CPU"]
    assert "on a CPU it often does not" in verdicts["XLA_NOT_REQUESTED"]["fix"]
    flag = verdicts["XLA_DEVICES_FLAG_SWITCHES_KERAS_AUTO"]
    assert flag["status"] == "warning"
    assert "--modes plain jit_compile" in flag["fix"] and "jit_compile=False" in flag["fix"]


def test_keras_auto_resolves_true_on_a_cpu_only_machine_exactly_when_the_xla_devices_flag_is_set() -> None:
    """What the verdict rests on, measured in two fresh processes: the flag alone flips a default model to XLA."""
    code = (
        "import numpy as np, keras\n"
        "m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])\n"
        "m.compile('sgd', 'mse')\n"
        "m.fit(np.ones((8, 4)), np.ones((8, 3)), verbose=0)\n"
        "print(m.jit_compile)"
    )
    results = []
    for flags in ("", "--tf_xla_enable_xla_devices"):
        env = dict(os.environ, TF_XLA_FLAGS=flags, KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="")
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env, check=False
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        results.append(proc.stdout.split()[-1])
    assert results == ["False", "True"]


@pytest.mark.parametrize(
    ("keras_auto", "accelerator", "code"),
    [
        (True, False, "XLA_DEVICES_FLAG_SWITCHES_KERAS_AUTO"),
        (True, True, "XLA_DEVICES_FLAG_OBSOLETE"),
        (False, False, "XLA_DEVICES_FLAG_OBSOLETE"),
        (None, False, "XLA_DEVICES_FLAG_OBSOLETE"),
    ],
)
def test_the_xla_devices_flag_is_blamed_for_keras_auto_only_on_a_machine_without_accelerator(
    keras_auto: bool | None, accelerator: bool, code: str
) -> None:
    """With a GPU/TPU Keras' "auto" is True without the flag; with "auto" False or no Keras 3, the flag changes nothing."""
    from keras_xla_guard.diagnose.tf_rules import switch_verdicts

    verdicts = switch_verdicts(
        get_jit="",
        env_auto_jit=None,
        env_cpu_global_jit=False,
        tf_cpu_global_jit=False,
        keras_backend="tensorflow",
        keras_auto_jit_compile=keras_auto,
        in_strategy=False,
        has_accelerator=accelerator,
        tf_xla_flags="--tf_xla_enable_xla_devices",
        onednn_opts=None,
        jit_fix="fix",
    )
    assert [v.code for v in verdicts if v.code.startswith("XLA_DEVICES_FLAG")] == [code]


def _doctor_json(*args: str, flags: str) -> dict[str, Any]:
    """`keras-xla-guard doctor --json` in a fresh process started with `TF_XLA_FLAGS=flags`."""
    proc = _cli("doctor", "--json", *args, env=dict(os.environ, TF_XLA_FLAGS=flags))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_unwritable_cache_directory_is_named_not_a_missing_backend(tmp_path: Path) -> None:
    """A cache directory TensorFlow cannot create fails every XLA compile; doctor names the path and the fix."""
    (tmp_path / "file").write_text("")
    cache = tmp_path / "file" / "cache"  # under a regular file: unwritable even for root
    autojit = f"--tf_xla_auto_jit=2 {_CPU_FLAG}"
    data = _doctor_json(flags=f"{autojit} --tf_xla_persistent_cache_directory={cache}")
    verdicts = {v["code"]: v for v in data["verdicts"]}
    assert [v["code"] for v in data["verdicts"]] == [
        "XLA_CACHE_DIR_UNWRITABLE",
        "AUTOJIT_REQUESTED",
        "JIT_COMPILE_AUTO_RESOLVES_FALSE",
        "ONEDNN_UNRELATED",
        "PROBE_FAILED",
    ]
    # TensorFlow's own failure on the device check, as doctor recorded it.
    assert data["device_checks"][0]["error"].startswith(
        f"FailedPreconditionError: {tmp_path / 'file'} is not a directory"
    )
    cause = verdicts["XLA_CACHE_DIR_UNWRITABLE"]
    assert cause["status"] == "error"
    assert cause["message"].startswith(
        f"TensorFlow's persistent compilation cache directory {str(cache)!r} "
        f"(--tf_xla_persistent_cache_directory in TF_XLA_FLAGS) cannot be written: "
        f"FailedPreconditionError: {tmp_path / 'file'} is not a directory."
    )
    assert "(failed here: jit_compile=True on /device:CPU:0, the auto-clustering probe)" in cause["message"]
    fix_lines = [line for line in cause["fix"].splitlines() if not line.startswith("#")]
    assert fix_lines == [
        f'export TF_XLA_FLAGS="{autojit} --tf_xla_persistent_cache_directory=$HOME/.cache/xla"',
        f'export TF_XLA_FLAGS="{autojit} --tf_xla_persistent_cache_directory={cache} '
        '--tf_xla_persistent_cache_read_only=true"',
    ]
    probe = verdicts["PROBE_FAILED"]
    assert "XLA_CACHE_DIR_UNWRITABLE" in probe["message"] and "is not a directory" in probe["message"]
    assert probe["fix"] == cause["fix"]
    assert not (tmp_path / "file").is_dir()
    text = _cli(
        "doctor",
        "--no-probe",
        env=dict(os.environ, TF_XLA_FLAGS=f"--tf_xla_persistent_cache_directory={cache}"),
    )
    assert "XLA_BACKEND_MISSING" not in text.stdout and "pip install" not in text.stdout
    assert "[ERROR] XLA_CACHE_DIR_UNWRITABLE" in text.stdout


@pytest.mark.slow
def test_existing_cache_directory_that_takes_no_file_is_named() -> None:
    """An existing directory where no file can be created (/proc/self) is named with TensorFlow's error."""
    data = _doctor_json("--no-probe", flags="--tf_xla_persistent_cache_directory=/proc/self")
    cause = data["verdicts"][0]
    assert cause["code"] == "XLA_CACHE_DIR_UNWRITABLE"
    assert re.search(
        r"'/proc/self' \(--tf_xla_persistent_cache_directory in TF_XLA_FLAGS\) cannot be written: "
        r"NotFoundError: /proc/self/\.keras_xla_guard_doctor_\d+\.tmp; No such file or directory\.",
        cause["message"],
    )
    # TensorFlow failed the same way when it stored the device check's program there.
    assert re.match(
        r"NotFoundError: /proc/self/xla_compile_cache__\S+; No such file or directory",
        data["device_checks"][0]["error"],
    )
    assert "XLA_BACKEND_MISSING" not in [v["code"] for v in data["verdicts"]]


@pytest.mark.slow
def test_read_only_cache_never_writes_and_an_unwritable_one_is_no_error(tmp_path: Path) -> None:
    """Read-only: XLA compiles, nothing is stored, an unwritable path is fine; writable: one program stored."""
    from keras_xla_guard.backend.xla_cache import PersistentCache

    (tmp_path / "file").write_text("")
    read_only = "--tf_xla_persistent_cache_read_only=true"
    unwritable = _doctor_json(
        "--no-probe", flags=f"--tf_xla_persistent_cache_directory={tmp_path / 'file' / 'c'} {read_only}"
    )
    assert unwritable["verdicts"][0]["code"] == "XLA_BACKEND_OK"
    assert "XLA_CACHE_DIR_UNWRITABLE" not in [v["code"] for v in unwritable["verdicts"]]
    for name, flags, stored in (("ro", read_only, 0), ("rw", "", 1)):
        directory = tmp_path / name
        directory.mkdir()
        data = _doctor_json("--no-probe", flags=f"--tf_xla_persistent_cache_directory={directory} {flags}")
        assert data["verdicts"][0]["code"] == "XLA_BACKEND_OK"
        # The device check compiles one jit_compile=True function: one program, stored only when writable.
        assert PersistentCache(str(directory)).entries() == stored
        assert len(list(directory.iterdir())) == stored


@pytest.mark.parametrize(
    "args, expected",
    [
        (("doctor", "--bogus"), "unrecognized arguments: --bogus"),
        (
            ("doctor", "--probe-timeout", "soon"),
            "--probe-timeout: expected a positive number of seconds, got 'soon'",
        ),
        (
            ("doctor", "--probe-timeout", "-1"),
            "--probe-timeout: expected a positive number of seconds, got '-1'",
        ),
        (
            ("doctor", "--probe-timeout", "nan"),
            "--probe-timeout: expected a positive number of seconds, got 'nan'",
        ),
        (
            ("doctor", "--probe-timeout", "inf"),
            "--probe-timeout: expected a positive number of seconds, got 'inf'",
        ),
        (("doctor", "--probe-t", "5"), "unrecognized arguments: --probe-t 5"),
    ],
)
def test_cli_doctor_bad_usage_exits_2_with_one_line(args: tuple[str, ...], expected: str) -> None:
    """Bad doctor usage exits with code 2 and exactly one stderr line naming the problem."""
    proc = _cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0]


def test_jit_compile_fix_sends_to_compare_first_with_measured_figures(clean_switches: None) -> None:
    """The jit_compile fix says to run `compare` first and quotes the measured CPU slowdowns (advice.CPU_EVIDENCE)."""
    from keras_xla_guard.diagnose.advice import measure_first

    report = doctor(probe=False, check_devices=False, resolve_keras=False)
    fix = report.verdict("XLA_NOT_REQUESTED").fix
    comments = " ".join(line[2:] for line in fix.splitlines() if line.startswith("# "))
    # Without a GPU the hedge cites the CPU figures (their check against the JSON: test_advice.py).
    assert f"{measure_first()}." in comments
    assert (
        fix.index("keras_xla_guard.compare(")
        < fix.index("keras-xla-guard compare")
        < fix.index("jit_compile=True)  # only if compare says jit_compile pays")
    )


def test_a_traces_blocker_comes_first_and_a_saved_compare_replaces_measuring(
    clean_switches: None, tmp_path
) -> None:
    """doctor(trace=...): an EagerPyFunc the run ran is JIT_COMPILE_BLOCKED, first; compare=...: its verdict is the fix."""
    from keras_xla_guard import CoverageReport, OpStat

    trace = CoverageReport(
        non_xla_op_time_s=0.01,
        top_non_xla_ops=(
            OpStat("EagerPyFunc", "sequential/py_layer/EagerPyFunc", 0.008, 4),
            OpStat("IteratorGetNextAsOptional", "IteratorGetNextAsOptional", 0.001, 4),
        ),
    )
    report = doctor(probe=False, check_devices=False, resolve_keras=False, trace=trace)
    assert report.codes[0] == "JIT_COMPILE_BLOCKED"
    assert "EagerPyFunc ('sequential/py_layer/EagerPyFunc')" in report.verdicts[0].message
    assert "Iterator" not in report.verdicts[0].message
    assert "jit_compile=True" not in report.verdict("XLA_NOT_REQUESTED").fix
    measured = doctor(
        probe=False,
        check_devices=False,
        resolve_keras=False,
        compare={"best_mode": "plain", "verdict": "plain is faster."},
    )
    assert measured.verdict("XLA_NOT_REQUESTED").fix == (
        "# compare measured in this log dir that jit_compile does not pay here: plain is faster"
    )


def test_doctor_text_shows_a_shared_fix_once(clean_switches: None) -> None:
    """Two verdicts with one fix (CPU, nothing requested): the text shows it once and names it."""
    report = doctor(probe=False, check_devices=False)
    shared = report.verdict("XLA_NOT_REQUESTED").fix
    assert report.verdict("JIT_COMPILE_AUTO_RESOLVES_FALSE").fix == shared  # the data keeps both
    text = str(report)
    assert text.count("keras-xla-guard compare module:fn") == 1
    assert "    fix: the same as XLA_NOT_REQUESTED's above" in text.splitlines()


@pytest.mark.slow
def test_a_probe_that_logged_nothing_says_when_the_log_level_hid_it(
    clean_switches: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/diagnosis.md: the level the probe process started with hid its lines, and doctor says so.

    The hint follows the probe's own environment, not this process' variable later (which JAX's import
    sets to 1 when it is unset).
    """
    from keras_xla_guard.diagnose.doctor import format_doctor_report

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    report = doctor(check_devices=False)
    assert report.probe is not None and report.probe.ran
    assert (report.probe.log_lines, report.probe.hidden_by_log_level) == ((), "2")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    text = format_doctor_report(report).splitlines()
    assert "  The probe process logged nothing about XLA (TF_CPP_MIN_LOG_LEVEL=2 hid its INFO lines)." in text


@pytest.mark.slow
def test_doctor_never_contradicts_the_log_lines_it_shows_and_lists_each_op_once() -> None:
    """TensorFlow's own line about doctor's device check sits above the report; the report agrees with it.

    Measured with TF_CPP_MIN_LOG_LEVEL unset: importing TensorFlow imports JAX (TF Lite's util), which sets
    the variable to 1, yet TensorFlow still prints "Compiled cluster using XLA!" for the device check. Doctor
    once said "TensorFlow logged nothing about XLA (TF_CPP_MIN_LOG_LEVEL=1 hides its INFO lines)" below it,
    and listed "Mul" twice among the probe's plain ops (the probe's step has two multiplications).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_XLA_FLAGS")}
    proc = _cli("doctor", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Compiled cluster using XLA!" in proc.stderr
    lines = proc.stdout.splitlines()
    assert "  XLA on /device:CPU:0: compiles and runs (a jit_compile=True function, in this process)" in lines
    assert "  The probe process logged nothing about XLA." in lines
    assert not [
        line
        for line in lines
        if "logged nothing" in line and line != "  The probe process logged nothing about XLA."
    ]
    (ops,) = [
        line.removeprefix("  plain TF ops: ").split(", ")
        for line in lines
        if line.startswith("  plain TF ops:")
    ]
    assert ops.count("Mul") == 1 and len(ops) == len(set(ops)), ops
    # And where its level hides them: no line from TensorFlow, and the report says why.
    flags = f"--tf_xla_auto_jit=2 {_CPU_FLAG}"
    proc = _cli("doctor", "--json", env=dict(env, TF_CPP_MIN_LOG_LEVEL="1", TF_XLA_FLAGS=flags))
    assert "Compiled cluster using XLA!" not in proc.stderr
    data = json.loads(proc.stdout)
    assert data["probe"]["ran_under_xla"] is True
    assert (data["probe"]["log_lines"], data["probe"]["hidden_by_log_level"]) == ([], "1")
    assert_no_list_repeats(data)
