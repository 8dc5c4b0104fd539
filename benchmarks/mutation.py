"""Mutation testing of the pure rooms and warm_up with the fast tests; prints JSON.

Runs mutmut (configured in pyproject.toml, `[tool.mutmut]`) over one room
at a time - `trace` (keras_xla_guard/trace/), `signatures`
(keras_xla_guard/signatures/), `warmup` (keras_xla_guard/warmup.py) - each
mutant against the fast tests (`-m "not slow"`) that cover it, then reads
mutmut's per-file results under `mutants/` and prints, per room, how many
mutants there were, how many the tests killed, how many survived (with
their names) and how long the room took. `make mutation` runs it through
`save_result.py`; docs/testing.md lists the survivors and why each stands.
It is a developer target, CPU-heavy (on two loaded cores about one
mutant a second in signatures and warmup, half that in trace: hours for
the three), and not part of `make ci`.

Usage: python benchmarks/mutation.py [--rooms trace,signatures,warmup] [--max-children 2] [--no-run | --resume [--survivors]]

`--no-run` only reads the results mutmut left under `mutants/` (of a run
stopped part-way, say): mutants not checked yet count under `other`.
`--resume` checks only those: mutmut given a pattern (`<room>*`, what a
plain run passes) checks every mutant it matches again, results or not.
It reads the results as they stand, so after the code changed, `mutmut
run` without names (which resets the changed functions' mutants and checks
every mutant without a result, of every room) is the way to resume.
`--resume --survivors` checks the survivors, and the mutants that had no
test, again too: mutmut keeps a result until the function's code changes,
so a test added against a survivor (or a function's first fast test)
counts only once the mutant is checked again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ROOMS = {
    "trace": "keras_xla_guard/trace/",
    "signatures": "keras_xla_guard/signatures/",
    "warmup": "keras_xla_guard/warmup.py",
}
# mutmut's exit codes per mutant (mutmut/stats.py): 1 and 3 are kills; 0 a survivor.
_STATUS = {
    0: "survived",
    1: "killed",
    3: "killed",
    5: "no_tests",
    33: "no_tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    37: "killed",
    None: "not_checked",
}


def _module(room: str) -> str:
    return ROOMS[room].rstrip("/").removesuffix(".py").replace("/", ".")


def room_results(room: str, mutants_dir: Path) -> dict[str, Any]:
    """Counts of one room's mutants by outcome, and its survivors' names, from mutmut's `.meta` files."""
    counts: Counter[str] = Counter()
    survivors: list[str] = []
    for meta in sorted(mutants_dir.glob("keras_xla_guard/**/*.py.meta")):
        source = meta.relative_to(mutants_dir).as_posix().removesuffix(".meta")
        if not source.startswith(ROOMS[room]):
            continue
        for name, code in json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"].items():
            status = _STATUS.get(code, "suspicious")
            counts[status] += 1
            if status == "survived":
                survivors.append(name)
    total = sum(counts.values())
    killed = counts["killed"] + counts["timeout"]
    return {
        "mutants": total,
        "killed": killed,
        "survived": counts["survived"],
        "no_tests": counts["no_tests"],
        "other": total - killed - counts["survived"] - counts["no_tests"],
        "score": round(killed / total, 4) if total else None,
        "survivors": sorted(survivors),
    }


def unchecked(room: str, mutants_dir: Path, survivors: bool = False) -> list[str]:
    """Names of one room's mutants that mutmut has no result for yet (and, if `survivors`, those that
    survived or had no test: a function's tests are recorded again each run), from its `.meta` files."""
    wanted = {None, 0, 5, 33} if survivors else {None}
    names: list[str] = []
    for meta in sorted(mutants_dir.glob("keras_xla_guard/**/*.py.meta")):
        if meta.relative_to(mutants_dir).as_posix().removesuffix(".meta").startswith(ROOMS[room]):
            codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
            names.extend(name for name, code in codes.items() if code in wanted)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rooms", default=",".join(ROOMS), help="comma-separated, from trace,signatures,warmup"
    )
    parser.add_argument("--max-children", type=int, default=2, help="parallel mutants. Defaults to 2.")
    parser.add_argument("--no-run", action="store_true", help="only read the results under mutants/.")
    parser.add_argument(
        "--resume", action="store_true", help="check only the mutants without a result under mutants/."
    )
    parser.add_argument(
        "--survivors", action="store_true", help="with --resume: check the survivors again too."
    )
    args = parser.parse_args(argv)
    rooms = args.rooms.split(",")
    bad = [r for r in rooms if r not in ROOMS]
    if bad or args.max_children < 1 or (args.no_run and args.resume) or (args.survivors and not args.resume):
        print(
            f"--rooms must be from {sorted(ROOMS)}, --max-children >= 1, --no-run and --resume "
            "exclude each other, and --survivors needs --resume. "
            f"Received: rooms={args.rooms!r}, max_children={args.max_children!r}, "
            f"no_run={args.no_run!r}, resume={args.resume!r}, survivors={args.survivors!r}",
            file=sys.stderr,
        )
        return 2
    out: dict[str, Any] = {
        "benchmark": "mutation",
        "tool": "mutmut",
        "tests": "fast (-m 'not slow')",
        "rooms": {},
    }
    for room in rooms:
        started = time.perf_counter()
        resume = args.resume and (ROOT / "mutants").is_dir()
        names = unchecked(room, ROOT / "mutants", args.survivors) if resume else [f"{_module(room)}*"]
        if args.no_run or not names:
            out["rooms"][room] = {**room_results(room, ROOT / "mutants"), "wall_s": None}
            continue
        proc = subprocess.run(
            [sys.executable, "-m", "mutmut", "run", *names, "--max-children", str(args.max_children)],
            cwd=ROOT,
            # tests/conftest.py: hypothesis properties skip shrinking a failing example.
            env={**os.environ, "HYPOTHESIS_PROFILE": "mutation"},
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(proc.stdout[-4000:], proc.stderr[-4000:], file=sys.stderr)
            return 1
        out["rooms"][room] = {
            **room_results(room, ROOT / "mutants"),
            "wall_s": round(time.perf_counter() - started, 1),
        }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
