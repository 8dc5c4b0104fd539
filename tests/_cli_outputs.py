"""`keras-xla-guard report`, every flag, on the stored real traces: what it prints.

`make test-no-tf` runs this twice: in the TensorFlow venv, writing every
case's exit code, stdout, stderr and HTML page to a folder, and in a venv
holding only the package's own dependencies (no TensorFlow, no Keras, the
oldest protobuf declared), checking that each case gives exactly the same
there. The no-TF run also checks that commands that need TensorFlow, and
`--html` without matplotlib, exit 2 with one line naming the extra.

The no-TF venv holds the oldest numpy and matplotlib declared too: plots are
drawn by matplotlib, so where the two venvs' versions differ the pages are
compared with each plot's SVG left out (the plots must still be the same
ones, in the same places).

```
.venv/bin/python tests/_cli_outputs.py write OUT
.venv-no-tf/bin/python tests/_cli_outputs.py check OUT
```
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "trace" / "data"
# The stored traces, each one run of a log dir (oldest first), and a run of
# two hosts.
TRACES = ("plain", "jit", "mlp", "eager_loop", "tf220_async_launch", "tf220_lost_split_launch", "py_function")
_COMPARE = {
    "verdict": "jit_compile makes the planned run 2.0x faster",
    "planned_steps": 10,
    "projected_run_s": {"plain": 2.0, "jit_compile": 1.0},
    "modes": {
        "plain": {
            "step_time_s": 0.2,
            "startup_s": 0.5,
            "compilations": 0,
            "compile_time_s": 0.0,
            "peak_memory_bytes": None,
        },
        "jit_compile": {
            "step_time_s": 0.05,
            "startup_s": 1.0,
            "compilations": 1,
            "compile_time_s": 0.5,
            "peak_memory_bytes": 1 << 20,
        },
    },
}


def _layout(root: Path) -> None:
    """Writes the traces as a log dir (`logs`) and a two-host run (`hosts`) under `root`."""
    for i, name in enumerate(TRACES):
        run = root / "logs" / "plugins" / "profile" / f"2026_01_01_00_00_0{i}_epoch{i}"
        run.mkdir(parents=True)
        data = gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes())
        (run / f"{name}.xplane.pb").write_bytes(data)
        # Runs are ordered by their newest trace's mtime: pin it.
        os.utime(run / f"{name}.xplane.pb", (1_700_000_000 + i, 1_700_000_000 + i))
    hosts = root / "hosts"
    hosts.mkdir()
    for host, name in (("worker-a", "plain"), ("worker-b", "jit")):
        shutil.copy(
            root / "logs" / "plugins" / "profile" / f"2026_01_01_00_00_0{TRACES.index(name)}"
            f"_epoch{TRACES.index(name)}" / f"{name}.xplane.pb",
            hosts / f"{host}.xplane.pb",
        )
    (root / "compare.json").write_text(json.dumps(_COMPARE), encoding="utf-8")


def cases() -> dict[str, list[str]]:
    """Every `report` case, by name: argv relative to the layout's root."""
    found: dict[str, list[str]] = {}
    profile = "logs/plugins/profile"
    for i, name in enumerate(TRACES):
        trace = f"{profile}/2026_01_01_00_00_0{i}_epoch{i}/{name}.xplane.pb"
        found[f"{name}-json"] = [trace, "--json", "--top-k", "1000"]
        found[f"{name}-text"] = [trace, "--compiles"]
    found.update(
        {
            "logdir-json": ["logs", "--json"],
            "logdir-all-json": ["logs", "--all", "--json", "--top-k", "3"],
            "logdir-all-text": ["logs", "--all", "--compiles", "--top-k", "0"],
            "logdir-thresholds-json": [
                "logs",
                "--all",
                "--json",
                "--min-coverage",
                "0.5",
                "--max-compilations",
                "0",
            ],
            "logdir-thresholds-text": ["logs", "--all", "--min-coverage", "0.99", "--max-compilations", "1"],
            "hosts-json": ["hosts", "--json", "--compiles"],
            "hosts-text": ["hosts", "--max-bytes", "64M"],
            "max-bytes": ["logs", "--all", "--max-bytes", "1K"],
            "bad-fraction": ["logs", "--min-coverage", "1.5"],
            "html-logdir": [
                "logs",
                "--all",
                "--html",
                "out/logdir.html",
                "--compare",
                "compare.json",
                "--min-coverage",
                "0.5",
            ],
            "html-hosts-json": ["hosts", "--json", "--html", "out/hosts.html"],
        }
    )
    return {name: ["report", *argv] for name, argv in found.items()}


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "keras-xla-guard"
    if not script.is_file():
        raise SystemExit(f"the console script is not installed next to {sys.executable}")
    return [str(script)]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_cli(), *argv], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def outputs(root: Path) -> dict[str, dict[str, Any]]:
    """Runs every case in `root` (laid out by `_layout`); returns what each gave."""
    (root / "out").mkdir(exist_ok=True)
    found = {}
    for name, argv in cases().items():
        proc = _run(argv, root)
        page = None
        if "--html" in argv:
            html = root / argv[argv.index("--html") + 1]
            page = html.read_text(encoding="utf-8") if html.is_file() else None
        found[name] = {
            "argv": argv,
            "rc": proc.returncode,
            "stdout": proc.stdout,
            "stderr": proc.stderr,
            "html": page,
        }
    return found


_SVG = re.compile(r"<svg\b.*?</svg>", re.S)


def _without_plots(page: str | None) -> str | None:
    """The page with each plot's SVG (matplotlib's drawing) replaced by an empty `<svg/>`."""
    return None if page is None else _SVG.sub("<svg/>", page)


def _matplotlib() -> str | None:
    try:
        return importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        return None


def _blocked(root: Path, module: str) -> dict[str, str]:
    """An environment in which `module` cannot be imported (a `sitecustomize` blocks it)."""
    folder = root / f"without_{module}"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
    }


def missing_dependency_failures(root: Path) -> list[str]:
    """What is wrong with the commands whose dependency is missing (empty when all is right)."""
    failures = []
    checks = [
        (["doctor", "--no-probe"], None, "[cpu]"),
        (["compare", "no_such_module:build", "--steps", "1"], None, "[cpu]"),
        (["report", "logs", "--html", "out/none.html"], _blocked(root, "matplotlib"), "[html]"),
    ]
    for argv, env, extra in checks:
        proc = _run(argv, root, env)
        lines = proc.stderr.splitlines()
        if (
            proc.returncode != 2
            or proc.stdout
            or len(lines) != 1
            or f"keras-xla-guard{extra}" not in lines[0]
        ):
            failures.append(
                f"{' '.join(argv)}: exit {proc.returncode}, stdout {proc.stdout!r}, "
                f"stderr {proc.stderr!r} (want exit 2 and one line naming {extra})"
            )
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["write", "check"])
    parser.add_argument("folder", type=Path, help="where `write` saves, and `check` reads, the outputs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kxg_cli_") as tmp:
        root = Path(tmp)
        _layout(root)
        found = outputs(root)
        if args.mode == "write":
            args.folder.mkdir(parents=True, exist_ok=True)
            (args.folder / "cli_outputs.json").write_text(json.dumps(found, indent=1, sort_keys=True))
            (args.folder / "matplotlib.txt").write_text(str(_matplotlib()))
            print(f"{len(found)} report cases written to {args.folder}")
            return 0
        failures = []
        if importlib.util.find_spec("tensorflow") or importlib.util.find_spec("keras"):
            failures.append("TensorFlow or Keras is installed here: this check needs a venv without them")
        want = json.loads((args.folder / "cli_outputs.json").read_text())
        same_plots = (args.folder / "matplotlib.txt").read_text() == str(_matplotlib())
        if not same_plots:
            print(
                f"matplotlib {_matplotlib()} here, {(args.folder / 'matplotlib.txt').read_text()} "
                "in the TensorFlow venv: HTML pages compared without their plots' SVG"
            )
            for case in (*want.values(), *found.values()):
                case["html"] = _without_plots(case["html"])
        if sorted(want) != sorted(found):
            failures.append(f"cases differ: {sorted(set(want) ^ set(found))}")
        for name in sorted(set(want) & set(found)):
            for key in ("rc", "stdout", "stderr", "html"):
                if want[name][key] != found[name][key]:
                    failures.append(
                        f"{name}: {key} differs from the TensorFlow venv's "
                        f"(report {' '.join(found[name]['argv'][1:])})"
                    )
        failures += missing_dependency_failures(root)
    for failure in failures:
        print("FAILED:", failure)
    print(
        f"{len(found)} report cases and 3 missing-dependency cases: "
        f"{len(found) + 3 - len(failures)} passed, {len(failures)} failed"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
