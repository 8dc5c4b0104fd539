"""benchmarks/mutation.py sums mutmut's per-file results by room: kills (time-outs
included), survivors by name, mutants without tests; bad rooms exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import mutation


def _meta(root: Path, source: str, codes: dict[str, int | None]) -> None:
    path = root / f"{source}.meta"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"exit_code_by_key": codes}))


def test_room_results_count_each_outcome_of_that_room_only(tmp_path):
    """Kills and time-outs count as killed; exit 0 survives; 33 has no tests; other rooms are left out."""
    _meta(
        tmp_path,
        "keras_xla_guard/signatures/buckets.py",
        {
            "b.x_f__mutmut_1": 1,
            "b.x_f__mutmut_2": 0,
            "b.x_f__mutmut_3": 36,
            "b.x_f__mutmut_4": 33,
            "b.x_f__mutmut_5": None,
        },
    )
    _meta(tmp_path, "keras_xla_guard/trace/classify.py", {"c.x_g__mutmut_1": 0})
    assert mutation.room_results("signatures", tmp_path) == {
        "mutants": 5,
        "killed": 2,
        "survived": 1,
        "no_tests": 1,
        "other": 1,
        "score": 0.4,
        "survivors": ["b.x_f__mutmut_2"],
    }
    assert mutation.room_results("warmup", tmp_path)["mutants"] == 0


def test_unknown_rooms_exit_2_naming_them(capsys):
    """--rooms outside trace, signatures, warmup: exit 2 and one line naming the value."""
    assert mutation.main(["--rooms", "trace,engine"]) == 2
    assert "rooms='trace,engine'" in capsys.readouterr().err


def test_unchecked_names_the_rooms_mutants_without_a_result(tmp_path):
    """Only mutants whose exit code is still None (with survivors=True, also 0), of that room's files,
    in file order."""
    _meta(tmp_path, "keras_xla_guard/trace/xplane.py", {"x.a__mutmut_1": None, "x.a__mutmut_2": 0})
    _meta(tmp_path, "keras_xla_guard/trace/_device.py", {"d.b__mutmut_1": 1, "d.b__mutmut_2": None})
    _meta(tmp_path, "keras_xla_guard/warmup.py", {"w.c__mutmut_1": None})
    assert mutation.unchecked("trace", tmp_path) == ["d.b__mutmut_2", "x.a__mutmut_1"]
    assert mutation.unchecked("warmup", tmp_path) == ["w.c__mutmut_1"]
    assert mutation.unchecked("signatures", tmp_path) == []
    assert mutation.unchecked("trace", tmp_path, survivors=True) == [
        "d.b__mutmut_2",
        "x.a__mutmut_1",
        "x.a__mutmut_2",
    ]


def test_no_run_and_resume_together_exit_2(capsys):
    """--no-run reads results and --resume runs: asking for both is a usage error naming both values."""
    assert mutation.main(["--no-run", "--resume"]) == 2
    assert "no_run=True, resume=True" in capsys.readouterr().err


def test_survivors_without_resume_exit_2(capsys):
    """--survivors only adds to --resume's names: alone it is a usage error naming the value."""
    assert mutation.main(["--survivors"]) == 2
    assert "survivors=True" in capsys.readouterr().err
