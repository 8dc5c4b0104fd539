"""The built wheel carries the license setup.cfg declares and the public API's table; the oldest numpy declared is tested."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_license_file_is_apache_2_and_ships_in_the_wheel(tmp_path: Path) -> None:
    """LICENSE is the Apache 2.0 text setup.cfg declares, and the built wheel holds it verbatim.

    The wheel also holds `__init__.pyi` (the public names the package reads
    at import) and `py.typed`, byte for byte, and declares the pytest plugin
    (`pytest11`) that pytest loads from installed packages.
    """
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert cfg["metadata"]["license"] == "Apache-2.0"
    assert cfg["metadata"]["license_files"].split() == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    # Built from a copy: setuptools builds in the source tree (build/, *.egg-info).
    src = tmp_path / "src"
    shutil.copytree(
        REPO / "keras_xla_guard", src / "keras_xla_guard", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("keras_xla_guard-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        licenses = [n for n in zf.namelist() if n.endswith("/LICENSE") and ".dist-info/" in n]
        assert len(licenses) == 1, zf.namelist()
        assert zf.read(licenses[0]).decode("utf-8") == text
        metadata = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        assert "License: Apache-2.0" in zf.read(metadata).decode("utf-8")
        for name in ("__init__.pyi", "py.typed"):
            assert zf.read(f"keras_xla_guard/{name}") == (REPO / "keras_xla_guard" / name).read_bytes()
        entry_points = configparser.ConfigParser()
        entry_points.read_string(
            zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))).decode(
                "utf-8"
            )
        )
        assert dict(entry_points["pytest11"]) == {
            "keras_xla_guard.pytest_plugin": "keras_xla_guard.pytest_plugin"
        }


def test_no_tf_venv_installs_the_oldest_numpy_declared() -> None:
    """`make test-no-tf` installs the oldest numpy setup.cfg declares on Python 3.10-3.11, and none older on any Python."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    declared = re.search(r"^numpy>=(\S+)$", cfg["options"]["install_requires"], re.M)
    assert declared is not None
    table = re.search(
        r"^OLDEST_NUMPY \?= .*?print\((\{.*?\})\.get\(sys\.version_info\[:2\], '([\d.]+)'\)",
        (REPO / "Makefile").read_text(),
        re.M | re.S,
    )
    assert table is not None
    by_python = {
        python: version for python, version in re.findall(r"\((3, \d+)\): '([\d.]+)'", table.group(1))
    }
    assert by_python["3, 10"] == by_python["3, 11"] == declared.group(1)

    def as_tuple(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    assert all(as_tuple(v) >= as_tuple(declared.group(1)) for v in [*by_python.values(), table.group(2)])
    # What make itself installs with this Python (`-B`: even where the venv is built).
    recipe = subprocess.run(
        ["make", "-nB", "--no-print-directory", "no-tf-venv", f"PYTHON={sys.executable}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    here = by_python.get(f"3, {sys.version_info[1]}", table.group(2))
    assert re.findall(r'"numpy==(\S+)"', recipe) == [here]


def test_jax_compat_venv_installs_the_oldest_tensorboard_declared() -> None:
    """`make test-jax-compat` (the guard without TensorFlow, on numpy 2) installs exactly the oldest
    tensorboard setup.cfg allows."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    declared = re.search(r"^tensorboard>=(\S+)$", cfg["options"]["install_requires"], re.M)
    pinned = re.search(r"^OLDEST_TENSORBOARD \?= (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert declared is not None and pinned is not None
    assert declared.group(1) == pinned.group(1)
    recipe = subprocess.run(
        ["make", "-nB", "--no-print-directory", ".venv-compat/jax-oldest/.installed", "COMPAT=.venv-compat"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert re.findall(r'"tensorboard==(\S+)"', recipe) == [declared.group(1)]


def test_no_tf_venv_installs_the_oldest_matplotlib_declared_beside_the_oldest_numpy() -> None:
    """`make test-no-tf` installs the oldest matplotlib the `html` extra declares where it installs the
    oldest numpy (Python 3.10-3.11, numpy 1: matplotlib 3.8 predates numpy 2); elsewhere it pins none."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    declared = re.search(r"^matplotlib>=(\S+)$", cfg["options.extras_require"]["html"], re.M)
    assert declared is not None
    table = re.search(
        r"^OLDEST_MATPLOTLIB \?= .*?print\((\{.*?\})\.get\(sys\.version_info\[:2\], ''\)",
        (REPO / "Makefile").read_text(),
        re.M | re.S,
    )
    assert table is not None
    by_python = dict(re.findall(r"\((3, \d+)\): '([\d.]+)'", table.group(1)))
    assert set(by_python) == {"3, 10", "3, 11"}
    # setup.cfg spells the floor `3.8`; pip's release is 3.8.0.
    assert set(by_python.values()) == {declared.group(1) + ".0"}
    recipe = subprocess.run(
        ["make", "-nB", "--no-print-directory", "no-tf-venv", f"PYTHON={sys.executable}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    here = by_python.get(f"3, {sys.version_info[1]}")
    assert re.findall(r'"matplotlib==(\S+)"', recipe) == ([here] if here else [])
