"""The built wheel carries the license setup.cfg declares and the public API's table; the venvs that
test the oldest dependencies declared install exactly those."""

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


def _floor(name: str, section: str = "options", key: str = "install_requires") -> str:
    """The oldest version of `name` setup.cfg declares (`name>=...`)."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    declared = re.search(rf"^{name}>=(\S+)$", cfg[section][key], re.M)
    assert declared is not None
    return declared.group(1)


def _by_python(variable: str) -> tuple[dict[str, str], str]:
    """The Makefile's table for `variable`: Python `"3, N"` -> version, and the version for any other."""
    table = re.search(
        rf"^{variable} \?= .*?print\((\{{.*?\}})\.get\(sys\.version_info\[:2\], '([\d.]*)'\)",
        (REPO / "Makefile").read_text(),
        re.M | re.S,
    )
    assert table is not None
    return dict(re.findall(r"\((3, \d+)\): '([\d.]+)'", table.group(1))), table.group(2)


def _pins(name: str, target: str, *assignments: str) -> list[str]:
    """The versions of `name` that make pins building `target` with this Python (`-nB`: even when built)."""
    recipe = subprocess.run(
        ["make", "-nB", "--no-print-directory", target, f"PYTHON={sys.executable}", *assignments],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return re.findall(rf'"{name}==(\S+)"', recipe)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_no_tf_venv_installs_the_oldest_protobuf_declared() -> None:
    """`make test-no-tf` installs exactly the oldest protobuf setup.cfg allows (the XSpace bindings are
    built at run time, `trace/_proto.py`)."""
    floor = _floor("protobuf")
    assert re.findall(r"^OLDEST_PROTOBUF \?= (\S+)$", (REPO / "Makefile").read_text(), re.M) == [floor]
    assert _pins("protobuf", "no-tf-venv") == [floor]


def test_no_tf_venv_installs_the_oldest_numpy_declared() -> None:
    """`make test-no-tf` installs the oldest numpy setup.cfg declares on Python 3.10-3.11, and on newer
    Pythons (no wheel that old) none older."""
    floor = _floor("numpy")
    by_python, other = _by_python("OLDEST_NUMPY")
    assert by_python["3, 10"] == by_python["3, 11"] == floor
    assert all(_version(v) >= _version(floor) for v in [*by_python.values(), other])
    assert _pins("numpy", "no-tf-venv") == [by_python.get(f"3, {sys.version_info[1]}", other)]


def test_jax_compat_venv_installs_the_oldest_tensorboard_declared() -> None:
    """`make test-jax-compat` (the guard without TensorFlow, on numpy 2) installs exactly the oldest
    tensorboard setup.cfg allows."""
    floor = _floor("tensorboard")
    assert re.findall(r"^OLDEST_TENSORBOARD \?= (\S+)$", (REPO / "Makefile").read_text(), re.M) == [floor]
    assert _pins("tensorboard", ".venv-compat/jax-oldest/.installed", "COMPAT=.venv-compat") == [floor]


def test_oldest_compat_venv_installs_the_oldest_xprof_declared() -> None:
    """`make test-compat` serves TensorBoard's Profile tab with exactly the oldest xprof the `profile`
    extra allows, beside the oldest TensorFlow and Keras."""
    floor = _floor("xprof", "options.extras_require", "profile")
    assert _floor("xprof", "options.extras_require", "test") == floor
    assert re.findall(r"^OLDEST_XPROF \?= (\S+)$", (REPO / "Makefile").read_text(), re.M) == [floor]
    assert _pins("xprof", ".venv-compat/oldest/.installed", "COMPAT=.venv-compat") == [floor]


def test_no_tf_venv_installs_the_oldest_matplotlib_declared_beside_the_oldest_numpy() -> None:
    """`make test-no-tf` installs the oldest matplotlib the `html` extra declares beside numpy 1 (Python
    3.10-3.12), and on 3.13 none older than the floor; on other Pythons it pins none."""
    floor = _floor("matplotlib", "options.extras_require", "html")
    by_python, other = _by_python("OLDEST_MATPLOTLIB")
    # setup.cfg spells the floor `3.8`; pip's release is 3.8.0.
    assert by_python["3, 10"] == by_python["3, 11"] == by_python["3, 12"] == floor + ".0"
    assert set(by_python) == {"3, 10", "3, 11", "3, 12", "3, 13"} and other == ""
    assert _version(by_python["3, 13"]) >= _version(floor + ".0")
    here = by_python.get(f"3, {sys.version_info[1]}")
    assert _pins("matplotlib", "no-tf-venv") == ([here] if here else [])
