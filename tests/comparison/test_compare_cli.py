"""`keras-xla-guard compare`: each mode in its own process, results combined; bad input exits 2.

The comparison runs plain against auto-clustering: on this CPU-only machine
auto-clustering compiles only when its process starts TensorFlow with
`TF_XLA_FLAGS=--tf_xla_cpu_global_jit`, which the CLI sets for that mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _fit_helpers import _events
from _helpers import REPO

from keras_xla_guard.cli import COMPARE_SCHEMA_VERSION, main

TARGET = """
import numpy as np


def build():
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).standard_normal((40, 8)).astype("float32")
    return model, (x, x[:, :1] * 0.5)


def broken():
    raise RuntimeError("no data today")
"""


def _cli(*argv: Any, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Runs the real command in a fresh interpreter, without the caller's XLA flags."""
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "keras_xla_guard.cli", *map(str, argv)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A target file defining build() and broken()."""
    path = tmp_path_factory.mktemp("target") / "target.py"
    path.write_text(TARGET)
    return path


@pytest.fixture(scope="module")
def compared(target: Path) -> tuple[dict[str, Any], Path]:
    """`compare target.py:build --modes plain autoclustering --json`, 4 steps of batch 16."""
    logs = target.parent / "logs"
    proc = _cli(
        "compare",
        f"{target.name}:build",
        "--steps",
        "4",
        "--batch-size",
        "16",
        "--modes",
        "plain",
        "autoclustering",
        "--planned-epochs",
        "2",
        "--json",
        "--log-dir",
        logs,
        cwd=target.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), logs


@pytest.mark.slow
def test_json_combines_each_modes_process(compared):
    """The JSON holds both modes; only auto-clustering (its process given the CPU flag) compiled."""
    doc, _ = compared
    assert (doc["schema_version"], doc["target"]) == (COMPARE_SCHEMA_VERSION, "target.py:build")
    # docs/compare.md: `compare --json` prints its keys sorted (json.loads keeps their order).
    assert list(doc) == sorted(doc) and list(doc["modes"]) == sorted(doc["modes"])
    assert set(doc["modes"]) == {"plain", "autoclustering"}
    plain, auto = doc["modes"]["plain"], doc["modes"]["autoclustering"]
    assert plain["compilations"] == 0
    # 40 rows in batches of 16: lengths 16, 16, 8 - two signatures, each compiled.
    assert plain["distinct_signatures"] == auto["distinct_signatures"] == 2
    assert auto["compilations"] >= 2 and auto["compile_time_s"] > 0
    assert len(plain["losses"]) == len(auto["losses"]) == 4
    assert plain["losses"][0] == pytest.approx(auto["losses"][0], rel=1e-5)


@pytest.mark.slow
def test_json_projects_the_planned_run_from_the_data(compared):
    """2 planned epochs of 3 batches, 2 signatures counted from the data; the verdict names the best mode."""
    doc, _ = compared
    assert (doc["planned_steps"], doc["planned_signatures"], doc["signatures_counted_from"]) == (6, 2, "data")
    assert doc["best_mode"] == min(doc["projected_run_s"], key=doc["projected_run_s"].get)
    assert doc["verdict"].startswith(doc["best_mode"]) and doc["wall_s"] > 0
    # The target's model, from the mode processes: Dense 8 -> 16 (144) and 16 -> 1 (17).
    assert doc["model"] == {"class": "Sequential", "name": "sequential", "params": 161}


@pytest.mark.slow
def test_cli_writes_tensorboard_beside_the_guards_runs(compared):
    """The parent writes <log-dir>/compare/<mode> scalars and the verdict text; traces sit beside them."""
    doc, logs = compared
    auto = _events(logs / "compare" / "autoclustering")
    assert auto["xla_guard/compare/compilations"] == {0: doc["modes"]["autoclustering"]["compilations"]}
    assert "xla_guard/compare/verdict" in _events(logs / "compare")
    assert list((logs / "compare" / "plain" / "plugins" / "profile").glob("*/*.xplane.pb"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "no_colon"], "the target must be `module_or_file:function`"),
        (["compare", "missing.py:build"], "no such file 'missing.py'"),
        (["compare", "target.py:build", "--modes", "plain"], "at least two different modes"),
        (["compare", "target.py:build", "--steps", "0"], "--steps: expected a positive integer, got '0'"),
        (["compare", "target.py:build", "--steps", "-1"], "--steps: expected a positive integer, got '-1'"),
        (
            ["compare", "target.py:build", "--batch-size", "x"],
            "--batch-size: expected a positive integer, got 'x'",
        ),
        (
            ["compare", "target.py:build", "--timeout", "nan"],
            "--timeout: expected a positive number of seconds, got 'nan'",
        ),
        (
            ["compare", "target.py:build", "--timeout", "0"],
            "--timeout: expected a positive number of seconds, got '0'",
        ),
        (["compare", "target.py:build", "--step", "5"], "unrecognized arguments: --step 5"),
        (["compare", "target.py:build", "--modes", "plain", "xla"], "invalid choice: 'xla'"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, target, capsys, monkeypatch):
    """Bad targets and arguments: exit 2, one line on stderr, before any TensorFlow starts."""
    monkeypatch.chdir(target.parent)
    try:
        code = main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_failing_target_exits_2_with_its_error(target):
    """The target's own error comes back from the mode's process as one stderr line, exit 2."""
    proc = _cli("compare", "target.py:broken", cwd=target.parent)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "keras-xla-guard: error: mode 'plain' failed: RuntimeError: no data today"
    ]


def test_worker_reports_a_target_that_does_not_return_a_pair(tmp_path, monkeypatch):
    """A target returning something else than (model, data): the worker writes one error line, exit 2."""
    from keras_xla_guard.comparison._worker import main as worker_main

    (tmp_path / "odd.py").write_text("def build():\n    return 3\n")
    monkeypatch.chdir(tmp_path)
    code = worker_main(["odd.py:build", "plain", str(tmp_path), str(tmp_path / "logs"), "--steps", "2"])
    assert code == 2
    assert json.loads((tmp_path / "plain.json").read_text()) == {
        "error": "ValueError: odd.py:build must return (model, data). Received: int"
    }


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "60"])
def test_compare_in_processes_refuses_a_bad_timeout_before_starting_a_process(bad, target, monkeypatch):
    """timeout_s must be a positive finite number of seconds: a ValueError naming it, no mode started."""
    from keras_xla_guard.comparison.processes import compare_in_processes

    monkeypatch.chdir(target.parent)
    started = []
    monkeypatch.setattr("subprocess.run", lambda *a, **k: started.append(a))
    with pytest.raises(
        ValueError, match=r"`timeout_s` must be a positive number of seconds\. Received: timeout_s="
    ):
        compare_in_processes("target.py:build", timeout_s=bad)
    assert started == []


@pytest.mark.slow
def test_report_on_the_log_dir_leaves_compares_profiles_out(compared, tmp_path, capsys):
    """After a real compare, `report LOG_DIR` reads the guard's run, not a newer compare pass; compare/ reads both modes."""
    import shutil

    _, logs = compared
    copy = tmp_path / "logs"
    shutil.copytree(logs, copy)
    traces = sorted((copy / "compare").glob("*/plugins/profile/*/*.xplane.pb"))
    assert [t.parents[3].name for t in traces] == ["autoclustering", "plain"]
    assert main(["report", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"pass {str(copy / 'compare')!r} to read them" in err
    assert main(["report", str(copy / "compare"), "--all"]) == 0
    out = capsys.readouterr().out
    assert all(t.parent.name in out for t in traces)
    guard_run = copy / "plugins" / "profile" / "2020_01_01_00_00_00_epoch1"
    guard_run.mkdir(parents=True)
    shutil.copy(traces[0], guard_run / "vm.xplane.pb")
    os.utime(guard_run / "vm.xplane.pb", (0, 0))
    assert main(["report", str(copy), "--all"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]  # after the run's headline and the table's header
    assert [row.split()[0] for row in rows if row.strip()] == ["2020_01_01_00_00_00_epoch1"]
