"""Tests for the `keras-xla-guard report` command on real traces.

Exit codes: 0 ok, 1 a threshold was violated, 2 bad input (one line on
stderr, no traceback).
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _oracle import RAW_REL, raw_figures
from _traces import profiled_fit, tiny_data, tiny_model

from keras_xla_guard.cli import REPORT_SCHEMA_VERSION, main
from keras_xla_guard.trace.report import CoverageReport

REPORT_KEYS = set(CoverageReport().to_dict())


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log dir with two runs: a plain fit, then (newest) a jit_compile fit."""
    logs = tmp_path_factory.mktemp("cli") / "logs"
    profiled_fit(logs, jit_compile=False)
    # TF names a run by the second it starts in: keep the two apart.
    time.sleep(1.1)
    profiled_fit(logs, jit_compile=True)
    return logs


@pytest.fixture(scope="module")
def runs(log_dir: Path) -> dict[str, Path]:
    """The run directories of `log_dir` by kind."""
    plain, jit = sorted((log_dir / "plugins" / "profile").iterdir(), key=lambda p: p.name)
    return {"plain": plain, "jit": jit}


@pytest.fixture(scope="module")
def two_hosts(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run dir holding a plain and a jit host trace, as a 2-host run would."""
    run = tmp_path_factory.mktemp("hosts") / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    shutil.copy(next(runs["plain"].glob("*.xplane.pb")), run / "worker-a.xplane.pb")
    shutil.copy(next(runs["jit"].glob("*.xplane.pb")), run / "worker-b.xplane.pb")
    return run


def run_cli(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    """Runs `main` in-process; returns (exit code, stdout, stderr)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def report_json(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, dict[str, Any]]:
    """Runs `report --json` in-process; returns (exit code, parsed document)."""
    code, out, err = run_cli(capsys, "report", *argv, "--json")
    assert err == ""
    return code, json.loads(out)


# ------------------------------------------------------------------- output


@pytest.mark.slow
def test_table_shows_the_newest_run_by_default(capsys, log_dir, runs):
    """A log dir reports its newest run only, as one compact table row."""
    code, out, err = run_cli(capsys, "report", log_dir)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["run", "host", "XLA", "share"]
    assert len(lines) == 2
    assert lines[1].startswith(runs["jit"].name)
    share = float(lines[1].split()[2].rstrip("%"))
    assert share >= 90.0


@pytest.mark.slow
def test_all_reports_every_run_oldest_first(capsys, log_dir, runs):
    """--all gives one row per run, oldest first, with their own coverage."""
    code, out, _ = run_cli(capsys, "report", log_dir, "--all")
    assert code == 0
    rows = out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == [runs["plain"].name, runs["jit"].name]
    assert rows[0].split()[2] == "0.0%"


@pytest.mark.slow
def test_json_schema_v1(capsys, log_dir, runs):
    """--json prints the documented schema: runs with hosts and combined, violations, ok."""
    code, doc = report_json(capsys, log_dir, "--all")
    assert code == 0
    assert set(doc) == {"schema_version", "tool_version", "path", "thresholds", "runs", "violations", "ok"}
    assert doc["schema_version"] == REPORT_SCHEMA_VERSION == 1
    assert doc["thresholds"] == {"min_coverage": None, "max_compilations": None}
    assert (doc["violations"], doc["ok"]) == ([], True)
    assert [r["run"] for r in doc["runs"]] == [runs["plain"].name, runs["jit"].name]
    for run in doc["runs"]:
        assert set(run) == {"run", "run_dir", "hosts", "combined"}
        assert Path(run["run_dir"]).name == run["run"]
        assert len(run["hosts"]) == 1
        assert set(run["hosts"][0]) == REPORT_KEYS
        assert run["combined"] == run["hosts"][0]
    plain, jit = (r["combined"] for r in doc["runs"])
    assert plain["xla_time_fraction"] == 0.0 and plain["top_non_xla_ops"]
    # XLA time, launches and share as summed from the trace's raw events.
    jit_host = doc["runs"][1]["hosts"][0]
    assert (jit["xla_time_s"], jit["xla_executions"], jit["xla_time_fraction"]) == pytest.approx(
        raw_figures(jit_host["trace_path"], jit["non_xla_op_time_s"]), rel=RAW_REL
    )
    # profiled_fit traces the whole fit: one batch shape (48 rows in batches
    # of 8), so one compile, and 6 steps, each one run of the executable.
    assert (jit["compilations"], jit["xla_executions"]) == (1, 6)
    assert (plain["compilations"], plain["xla_executions"]) == (0, 0)


@pytest.mark.slow
def test_several_hosts_give_a_row_each_and_a_combined_row(capsys, two_hosts):
    """A run with two host files: two host rows, then an 'all 2 hosts' row."""
    code, out, _ = run_cli(capsys, "report", two_hosts)
    assert code == 0
    rows = out.splitlines()[1:]
    assert [r.split()[1] for r in rows] == ["worker-a", "worker-b", "all"]
    assert "all 2 hosts" in rows[2]


@pytest.mark.slow
def test_combined_json_row_sums_the_hosts(capsys, two_hosts):
    """The combined report adds the hosts' times and recomputes the fraction."""
    _, doc = report_json(capsys, two_hosts)
    (run,) = doc["runs"]
    a, b = run["hosts"]
    combined = run["combined"]
    assert (a["hosts"], b["hosts"], combined["hosts"]) == (
        ["worker-a"],
        ["worker-b"],
        ["worker-a", "worker-b"],
    )
    assert combined["xla_time_s"] == pytest.approx(a["xla_time_s"] + b["xla_time_s"])
    assert combined["non_xla_op_time_s"] == pytest.approx(a["non_xla_op_time_s"] + b["non_xla_op_time_s"])
    xla, non = combined["xla_time_s"], combined["non_xla_op_time_s"]
    assert combined["xla_time_fraction"] == pytest.approx(xla / (xla + non))
    assert 0.0 < combined["xla_time_fraction"] < 1.0
    # worker-a is the plain fit (0 compiles, 0 runs), worker-b the jit fit
    # (1 compile, 6 runs: see test_json_schema_v1).
    assert (a["compilations"], b["compilations"], combined["compilations"]) == (0, 1, 1)
    assert (a["xla_executions"], b["xla_executions"], combined["xla_executions"]) == (0, 6, 6)


@pytest.mark.slow
def test_top_k_limits_the_listed_ops(capsys, runs):
    """--top-k bounds top_non_xla_ops of every report."""
    _, doc = report_json(capsys, runs["plain"], "--top-k", "2")
    assert len(doc["runs"][0]["combined"]["top_non_xla_ops"]) == 2


# --------------------------------------------------------------- thresholds


@pytest.mark.slow
def test_min_coverage_violation_exits_1_and_says_why(capsys, runs):
    """A run below --min-coverage exits 1 and prints a FAILED line."""
    code, out, err = run_cli(capsys, "report", runs["plain"], "--min-coverage", "0.5")
    assert (code, err) == (1, "")
    assert out.splitlines()[-1] == (
        f"FAILED: run {runs['plain'].name}: XLA share 0.0% is below --min-coverage 50.0%"
    )
    code, _, _ = run_cli(capsys, "report", runs["jit"], "--min-coverage", "0.5")
    assert code == 0


@pytest.mark.slow
def test_max_compilations_is_inclusive(capsys, runs):
    """--max-compilations N passes at exactly N compilations and fails below."""
    _, doc = report_json(capsys, runs["jit"])
    n = doc["runs"][0]["combined"]["compilations"]
    assert n == 1  # one batch shape in the whole traced fit: one compile
    code, ok_doc = report_json(capsys, runs["jit"], "--max-compilations", n)
    assert (code, ok_doc["ok"]) == (0, True)
    code, bad = report_json(capsys, runs["jit"], "--max-compilations", n - 1)
    assert (code, bad["ok"]) == (1, False)
    (violation,) = bad["violations"]
    assert violation["check"] == "max_compilations"
    assert (violation["threshold"], violation["value"]) == (n - 1, n)
    assert bad["thresholds"]["max_compilations"] == n - 1


@pytest.mark.slow
def test_thresholds_are_checked_per_run(capsys, log_dir, runs):
    """With --all, each run is checked on its own; only the failing run is listed."""
    code, doc = report_json(capsys, log_dir, "--all", "--min-coverage", "0.9")
    assert code == 1
    assert [v["run"] for v in doc["violations"]] == [runs["plain"].name]
    assert doc["violations"][0]["value"] == 0.0


# ---------------------------------------------------------------- bad input


# Bad paths and bad files. Placeholders: {missing}, {empty}, {noise}
# (random bytes), {bare} (no traces).
BAD_PATHS = {
    "missing path": ["report", "{missing}"],
    "empty file": ["report", "{empty}"],
    "random bytes": ["report", "{noise}"],
    "dir without traces": ["report", "{bare}"],
    "missing path argument": ["report"],
    "empty path argument": ["report", ""],
    "no subcommand": [],
}


@pytest.mark.parametrize("case", list(BAD_PATHS))
def test_bad_path_exits_2_with_one_line_on_stderr(capsys, tmp_path, case):
    """Bad paths and unreadable files: exit 2, one stderr line, no traceback."""
    paths = {name: tmp_path / f"{name}.xplane.pb" for name in ("missing", "empty", "noise")}
    paths["empty"].write_bytes(b"")
    paths["noise"].write_bytes(random.Random(1).randbytes(2048))
    paths["bare"] = tmp_path / "no_traces"
    paths["bare"].mkdir()
    code, out, err = run_cli(capsys, *(a.format(**paths) for a in BAD_PATHS[case]))
    assert code == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1
    assert err.startswith("keras-xla-guard") and "error:" in err
    assert "Traceback" not in err


# Bad options after a valid log dir, with the one stderr line each must give:
# the log dir alone reports fine (exit 0), so only the validator can make
# these exit 2, and the text pins which validator spoke.
_ARG = "keras-xla-guard report: error: argument"
BAD_OPTIONS = {
    "coverage above 1": (
        ["--min-coverage", "1.5"],
        f"{_ARG} --min-coverage: expected a fraction between 0 and 1, got '1.5'",
    ),
    "coverage not a number": (
        ["--min-coverage", "abc"],
        f"{_ARG} --min-coverage: expected a fraction between 0 and 1, got 'abc'",
    ),
    "coverage nan": (
        ["--min-coverage", "nan"],
        f"{_ARG} --min-coverage: expected a fraction between 0 and 1, got 'nan'",
    ),
    "negative compilations": (
        ["--max-compilations", "-1"],
        f"{_ARG} --max-compilations: expected a non-negative integer, got '-1'",
    ),
    "zero size cap": (
        ["--max-bytes", "0"],
        f"{_ARG} --max-bytes: expected a positive size in bytes (suffix K, M or G allowed), got '0'",
    ),
    "bad size unit": (
        ["--max-bytes", "12X"],
        f"{_ARG} --max-bytes: expected a positive size in bytes (suffix K, M or G allowed), got '12X'",
    ),
    "bad top-k": (["--top-k", "many"], f"{_ARG} --top-k: expected a non-negative integer, got 'many'"),
    "unknown option": (["--colour"], "keras-xla-guard: error: unrecognized arguments: --colour"),
    "abbreviated option": (
        ["--max-compilation", "3"],
        "keras-xla-guard: error: unrecognized arguments: --max-compilation 3",
    ),
    "unreadable --compare": (
        ["--compare", "no_such_compare.json"],
        "keras-xla-guard: error: --compare cannot read 'no_such_compare.json': No such file or directory",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_bad_option_on_a_valid_log_dir_exits_2_naming_the_option(capsys, log_dir, case):
    """Each option validator rejects its bad value on a valid log dir with its own one-line message."""
    argv, message = BAD_OPTIONS[case]
    code, out, err = run_cli(capsys, "report", log_dir, *argv)
    assert (code, out, err) == (2, "", message + "\n")


@pytest.mark.slow
def test_valid_log_dir_alone_exits_0(capsys, log_dir):
    """The log dir the bad-option cases use reports fine without them (the control)."""
    code, out, err = run_cli(capsys, "report", log_dir)
    assert (code, err) == (0, "") and out


@pytest.mark.slow
def test_size_cap_on_a_real_trace_names_its_size_and_the_option(capsys, runs):
    """A real trace above --max-bytes 1K exits 2 with its exact size and the cap in the message."""
    (trace,) = runs["jit"].glob("*.xplane.pb")
    size = trace.stat().st_size
    assert size > 1024
    code, out, err = run_cli(capsys, "report", runs["jit"], "--max-bytes", "1K")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert f"{size} bytes, above the cap of 1024 bytes" in err and "--max-bytes" in err


def test_size_cap_message_names_the_option(capsys, tmp_path):
    """The size-cap error says how to raise the cap."""
    trace = tmp_path / "big.xplane.pb"
    trace.write_bytes(b"\0" * 5000)
    code, _, err = run_cli(capsys, "report", trace, "--max-bytes", "4K")
    assert code == 2
    assert "5000 bytes, above the cap of 4096 bytes" in err and "--max-bytes" in err


# --------------------------------------------------------- real subprocesses


def _console_script() -> Path:
    script = Path(sys.executable).parent / "keras-xla-guard"
    assert script.is_file(), f"console script not installed next to {sys.executable}"
    return script


@pytest.mark.slow
def test_console_script_exit_codes_and_clean_stderr(log_dir, runs, tmp_path):
    """The installed `keras-xla-guard report` exits 0/1/2 with one clean stderr line on 2."""
    script = str(_console_script())

    def run(*argv: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, "report", *map(str, argv)], capture_output=True, text=True, timeout=120
        )

    ok = run(log_dir, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["runs"][0]["run"] == runs["jit"].name
    assert ok.stderr == ""
    violated = run(runs["plain"], "--min-coverage", "0.9")
    assert violated.returncode == 1
    assert "FAILED" in violated.stdout
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    for argv in ([empty], [log_dir, "--min-coverage", "1.5"], []):
        bad = run(*argv)
        assert bad.returncode == 2
        assert bad.stdout == ""
        assert len(bad.stderr.splitlines()) == 1 and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_report_does_not_import_tensorflow(runs):
    """`report` reads traces without importing TensorFlow (fast start, no TF logs)."""
    code = (
        "import sys; from keras_xla_guard.cli import main; "
        f"rc = main(['report', {str(runs['jit'])!r}, '--json']); "
        "print('TF_IMPORTED' if 'tensorflow' in sys.modules else 'TF_ABSENT', rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[-1] == "TF_ABSENT 0", proc.stderr


# ------------------------------------------- keras.callbacks.TensorBoard traces


def _tensorboard_and_guard(tmp: Path, jit_compile: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """`report --json`'s host report of steps profiled by keras' TensorBoard, and XlaGuardCallback's."""
    import keras

    from keras_xla_guard import XlaGuardCallback

    x, y = tiny_data(160)
    tb_dir = tmp / f"tb_{jit_compile}"
    tb = keras.callbacks.TensorBoard(log_dir=str(tb_dir), profile_batch=(2, 4))
    tiny_model(jit_compile).fit(x, y, batch_size=8, epochs=1, callbacks=[tb], verbose=0)
    guard = XlaGuardCallback(
        log_dir=tmp / f"guard_{jit_compile}",
        profile_epochs=(0,),
        skip_steps=2,
        max_steps=3,
        write_summaries=False,
        verbose=0,
    )
    tiny_model(jit_compile).fit(x, y, batch_size=8, epochs=1, callbacks=[guard], verbose=0)
    report = guard.reports[0]
    assert report.status == "ok", report.reason
    doc = json.loads(
        subprocess.run(
            [str(_console_script()), "report", str(tb_dir), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    return doc["runs"][0]["hosts"][0], report.to_dict()


def _xla_figures(report: dict[str, Any]) -> tuple[float, int, float]:
    return report["xla_time_s"], report["xla_executions"], report["xla_time_fraction"]


@pytest.mark.slow
def test_tensorboard_profile_batch_trace_matches_the_guard(tmp_path):
    """TensorBoard(profile_batch=(2, 4)) traces give the guard's coverage; each is its raw events' sum."""
    tb_jit, guard_jit = _tensorboard_and_guard(tmp_path, jit_compile=True)
    for report in (tb_jit, guard_jit):
        assert _xla_figures(report) == pytest.approx(
            raw_figures(report["trace_path"], report["non_xla_op_time_s"]), rel=RAW_REL
        )
    # Three steps each, one program run per step (TensorBoard's (2, 4) and
    # the guard's skip 2, max 3), the compile in step 0, outside both.
    assert tb_jit["xla_executions"] == guard_jit["xla_executions"] == 3
    assert tb_jit["xla_time_fraction"] == pytest.approx(guard_jit["xla_time_fraction"], abs=0.05)
    tb_plain, guard_plain = _tensorboard_and_guard(tmp_path, jit_compile=False)
    assert _xla_figures(tb_plain) == _xla_figures(guard_plain) == (0.0, 0, 0.0)


# ------------------------------------------------------------ hostile input

_HOSTILE = "\x1b]0;pwned\x07\x1b[2J\nforged  row"


@pytest.fixture
def deep_dir(tmp_path: Path) -> Any:
    """`tmp_path/deep/a/a/.../a`, 1,100 levels; yields the deepest directory.

    Built and removed level by level: pytest's own clean-up of old temporary
    directories recurses and would fail on it (in later sessions, too).
    """
    import os

    root, levels = tmp_path / "deep", 1100
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir("a", dir_fd=fd)
        fd, parent = os.open("a", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)
    bottom = Path(str(root) + "/a" * levels)
    yield bottom
    for f in bottom.iterdir():
        f.unlink()
    for directory in [bottom, *bottom.parents][: levels + 1]:
        directory.rmdir()


def test_control_characters_in_trace_names_are_escaped(capsys, tmp_path):
    """A kernel name with terminal control sequences is printed escaped, on its own row."""
    from _xspace import build_space

    space = build_space(
        {
            "tf_Compute/1": [
                (
                    "ExecutorState::ProcessAsync::Start",
                    0,
                    50,
                    {"name": "op" + _HOSTILE, "kernel_type": "Type" + _HOSTILE},
                ),
            ]
        }
    )
    trace = tmp_path / "plugins" / "profile" / "run" / "host.xplane.pb"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(space.SerializeToString())
    code, out, err = run_cli(capsys, "report", tmp_path)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[1].endswith("Type\\x1b]0;pwned\\x07\\x1b[2J\\nforged  row (0.0 ms)")
    assert all(c.isprintable() for c in out.replace("\n", ""))


@pytest.mark.slow
def test_control_characters_in_run_and_host_names_are_escaped(capsys, runs, tmp_path):
    """Hostile run and host names of a real trace are escaped in the table and in errors."""
    run = tmp_path / "plugins" / "profile" / f"run{_HOSTILE}"
    run.mkdir(parents=True)
    shutil.copy(next(runs["jit"].glob("*.xplane.pb")), run / f"host{_HOSTILE}.xplane.pb")
    code, out, err = run_cli(capsys, "report", tmp_path, "--min-coverage", "1")
    assert (code, err) == (1, "")
    assert out.splitlines()[1].startswith(
        "run\\x1b]0;pwned\\x07\\x1b[2J\\nforged  row  host\\x1b]0;pwned\\x07\\x1b[2J\\nforged  row  "
    )
    assert out.count("\n") == 3  # header, row, FAILED line
    assert "FAILED: run run\\x1b]0;pwned" in out
    code, out, err = run_cli(capsys, "report", tmp_path / f"missing{_HOSTILE}")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "missing\\x1b]0;pwned\\x07" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"PYTHONIOENCODING": "ascii"}, b"\\xe9preuve  w\\xf6rker  "),
        # Here file names decode as ASCII too: their UTF-8 bytes show escaped.
        (
            {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"},
            b"\\xc3\\xa9preuve  w\\xc3\\xb6rker  ",
        ),
    ],
    ids=["PYTHONIOENCODING=ascii", "LANG=C"],
)
def test_ascii_only_stdout_still_prints_a_valid_trace(runs, tmp_path, env, names):
    """With an ASCII stdout, non-ASCII names print as escapes and the exit code stays 0."""
    import os

    run = tmp_path / "plugins" / "profile" / "épreuve"
    run.mkdir(parents=True)
    shutil.copy(next(runs["jit"].glob("*.xplane.pb")), run / "wörker.xplane.pb")
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LC_ALL", "LANG")}
    proc = subprocess.run(
        [sys.executable, "-m", "keras_xla_guard.cli", "report", str(tmp_path)],
        capture_output=True,
        env={**full_env, **env},
        timeout=120,
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""
    assert proc.stdout.splitlines()[1].startswith(names)


@pytest.mark.slow
def test_log_dir_1100_levels_deep_is_searched(capsys, runs, deep_dir):
    """A 1,100-level tree: no trace gives exit 2 and one line; a trace at the bottom is found."""
    root = deep_dir.parents[1099]
    code, out, err = run_cli(capsys, "report", root)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "No *.xplane.pb trace found" in err
    shutil.copy(next(runs["jit"].glob("*.xplane.pb")), deep_dir / "host.xplane.pb")
    code, out, err = run_cli(capsys, "report", root)
    assert (code, err) == (0, "")
    assert out.splitlines()[1].split()[:2] == ["a", "host"]


# ------------------------------------------------------------------- --html


@pytest.mark.slow
def test_html_from_traces_alone_shows_every_run_and_the_failed_threshold(capsys, log_dir, tmp_path):
    """Without a run file the page is built from the traces: each run's figures, and why it exits 1."""
    from _html import read_page

    page_path = tmp_path / "report.html"
    code, out, err = run_cli(capsys, "report", log_dir, "--all", "--min-coverage", "0.5", "--html", page_path)
    assert (code, err) == (1, "")
    _, doc = report_json(capsys, log_dir, "--all", "--min-coverage", "0.5")
    page = read_page(page_path.read_text(encoding="utf-8"))
    for index, run in enumerate(doc["runs"]):
        for field in ("xla_time_fraction", "xla_time_s", "non_xla_op_time_s", "compilations"):
            assert page.value(field, **{"data-index": index, "class": "report"}) == run["combined"][field]
    text = "".join(page.text)
    assert f"keras-xla-guard report exits 1: {doc['violations'][0]['message']}" in text
    assert "XLA ran only 0.0% of op time in the trace" in text
    assert "No input-signature figures for this run" in text


_BAD_COMPARES = {
    "mode_not_an_object": (
        {"modes": {"plain": 5}, "verdict": "v"},
        "modes['plain']: expected an object, got 5",
    ),
    "step_time_a_string": (
        {
            "modes": {
                "plain": {"step_time_s": "fast", "startup_s": 0.1, "compilations": 0, "compile_time_s": 0.0}
            },
            "verdict": "v",
        },
        "modes['plain'].step_time_s: expected a number from 0 to 1e+09, got 'fast'",
    ),
    "projected_null": (
        {"modes": {}, "projected_run_s": None, "verdict": "v"},
        "projected_run_s: expected an object, got None",
    ),
    "verdict_missing": ({"modes": {}}, "verdict: missing"),
    "a_list": ([1, 2], "(top level): expected an object, got [1, 2]"),
}


@pytest.mark.parametrize("case", list(_BAD_COMPARES))
def test_a_compare_result_of_wrong_types_exits_2_naming_the_file_and_the_field(capsys, tmp_path, case):
    """A saved compare result (in the log dir, or --compare) with a wrong type: exit 2, one line, no page."""
    doc, problem = _BAD_COMPARES[case]
    run = tmp_path / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    (run / "host.xplane.pb").write_bytes(
        gzip.decompress((Path(__file__).parent / "trace" / "data" / "jit.xplane.pb.gz").read_bytes())
    )
    saved = tmp_path / "compare" / "compare_report.json"
    saved.parent.mkdir()
    saved.write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "report", tmp_path, "--html", tmp_path / "r.html")
    assert (code, out) == (2, "")
    assert err == f"keras-xla-guard: error: {str(saved)!r} is not a saved compare result: {problem}\n"
    given = tmp_path / "given.json"
    given.write_text(json.dumps(doc))
    saved.unlink()
    code, out, err = run_cli(capsys, "report", tmp_path, "--html", tmp_path / "r.html", "--compare", given)
    assert (code, out) == (2, "")
    assert err == (
        "keras-xla-guard: error: --compare must name the JSON `compare --json` prints: "
        f"{str(given)!r} is not a saved compare result: {problem}\n"
    )
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_html_without_matplotlib_exits_2_naming_the_extra(capsys, runs, tmp_path, monkeypatch):
    """Without matplotlib `report --html` exits 2 with one line naming the `html` extra."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = run_cli(capsys, "report", runs["plain"], "--html", tmp_path / "r.html")
    assert code == 2 and err.count("\n") == 1
    assert 'pip install "keras-xla-guard[html]"' in err


@pytest.mark.tf
def test_doctor_trace_that_is_missing_exits_2(capsys, tmp_path):
    """`doctor --trace` with no trace there: exit 2, one line naming the path."""
    code, out, err = run_cli(capsys, "doctor", "--no-probe", "--trace", tmp_path / "nope")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and str(tmp_path / "nope") in err


@pytest.mark.parametrize(
    "argv, module",
    [
        (("doctor", "--no-probe"), "tensorflow"),
        # Keras missing beside an installed TensorFlow: only where TensorFlow is.
        pytest.param(("doctor", "--no-probe"), "keras", marks=pytest.mark.tf),
        (("compare", "no_such_module:build", "--steps", "1"), "tensorflow"),
    ],
)
def test_commands_that_run_tensorflow_exit_2_naming_the_extra_without_it(capsys, monkeypatch, argv, module):
    """`doctor`/`compare` without TensorFlow or Keras: exit 2, one line naming the `cpu` extra, no traceback."""
    monkeypatch.setitem(sys.modules, module, None)
    code, out, err = run_cli(capsys, *argv)
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert f"{module} is not installed" in err
    assert 'pip install "keras-xla-guard[cpu]" (or [gpu] on a GPU machine)' in err


def test_a_required_module_missing_exits_2_naming_it(capsys, monkeypatch, tmp_path):
    """A dependency that fails to import mid-command gives exit 2 and one line naming it, never exit 1."""
    trace = tmp_path / "jit.xplane.pb"
    trace.write_bytes(
        gzip.decompress((Path(__file__).parent / "trace" / "data" / "jit.xplane.pb.gz").read_bytes())
    )
    monkeypatch.setitem(sys.modules, "numpy", None)
    code, out, err = run_cli(capsys, "report", trace, "--min-coverage", "0.5")
    assert (code, out) == (2, "")
    assert err == "keras-xla-guard: error: numpy is not installed: pip install numpy.\n"


# ------------------------------------------------------- the guard's run file


@pytest.fixture
def guarded_log_dir(jit_fit, tmp_path: Path) -> Path:
    """A copy of a real guarded fit's log dir: its traces, event file and run file."""
    copy = tmp_path / "guarded"
    shutil.copytree(jit_fit.log_dir, copy)
    return copy


def _break_run_file(log_dir: Path, case: str) -> Path:
    """Writes the run file of `log_dir` broken as `case` says; returns it."""
    path = log_dir / "xla_guard_reports.json"
    data = json.loads(path.read_text())
    report = data["reports"]["1"]
    if case == "deep":
        path.write_text("[" * 200_000 + "]" * 200_000)
        return path
    if case == "report_null":
        data["reports"]["1"] = None
    elif case == "notes_5":
        report["notes"] = 5
    elif case == "hosts_7":
        report["hosts"] = 7
    elif case == "bad_ops":
        report["top_non_xla_ops"] = [{"op_type": "MatMul"}]
    elif case == "bad_compile_table":
        report["compile_table"] = "none"
    elif case == "bad_signatures":
        data["signatures"]["1"]["signatures"] = [{"paths": [], "shapes": 3, "dtypes": []}]
    path.write_text(json.dumps(data))
    return path


RUN_FILE_CASES = {
    "deep": "its JSON is nested deeper than any run file",
    "report_null": "reports['1']: expected an object, got None",
    "notes_5": "reports['1'].notes: expected a list, got 5",
    "hosts_7": "reports['1'].hosts: expected a list, got 7",
    "bad_ops": "reports['1'].top_non_xla_ops[0].op_name: missing",
    "bad_compile_table": "reports['1'].compile_table: expected a list, got 'none'",
    "bad_signatures": "signatures['1'].signatures[0].shapes: expected a list, got 3",
}


@pytest.mark.slow
@pytest.mark.parametrize("html", [False, True], ids=["report", "report --html"])
@pytest.mark.parametrize("case", list(RUN_FILE_CASES))
def test_bad_run_file_exits_2_with_one_line_naming_the_file_and_the_field(
    capsys, guarded_log_dir, tmp_path, case, html
):
    """A run file with a wrong type or any depth beside real traces: exit 2, one line, file and field named."""
    code, out, err = run_cli(capsys, "report", guarded_log_dir)
    assert (code, err) == (0, "") and out  # the control: the intact log dir reports
    path = _break_run_file(guarded_log_dir, case)
    page = tmp_path / "page.html"
    code, out, err = run_cli(capsys, "report", guarded_log_dir, *(["--html", page] if html else []))
    assert (code, out) == (2, "")
    assert err == (
        f"keras-xla-guard: error: {str(path)!r} is not a readable run file: {RUN_FILE_CASES[case]}\n"
    )
    assert not page.exists()


@pytest.mark.parametrize(
    ("value", "threshold", "shown"),
    [
        (0.0, 0.5, ("0.0%", "50.0%")),
        (0.99996, 0.99999, ("99.996%", "99.999%")),
        (0.99996, 1.0, ("99.996%", "100.000%")),
        (0.5, 0.5000000001, ("0.5", "0.5000000001")),
    ],
)
def test_a_failed_min_coverage_never_prints_the_share_equal_to_the_threshold(value, threshold, shown):
    """The FAILED line's two percentages get the fewest decimals (from 1) that tell them apart."""
    from keras_xla_guard.cli import _distinct_percents

    assert _distinct_percents(value, threshold) == shown


def test_no_command_lists_every_command_the_parser_has(capsys):
    """`keras-xla-guard` alone: exit 2, one line naming each subcommand (the parser's own list) and --help."""
    import argparse

    from keras_xla_guard.cli import build_parser

    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    code, out, err = run_cli(capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"keras-xla-guard: error: no command given; choose one of: {', '.join(sub.choices)} "
        "(keras-xla-guard --help describes them)\n"
    )
