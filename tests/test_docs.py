"""The README is a short front door and docs/ builds with MkDocs: a real
`mkdocs build --strict` renders the API reference from the docstrings, and
every relative link in the Markdown and in the built site resolves."""

from __future__ import annotations

import configparser
import html
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import keras_xla_guard

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT_BYTES = 12 * 1024
BUILD_TIMEOUT_S = 300

# Markdown links and images: `[text](target)`, `![alt](target "title")`.
_MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]+`")
# `tests/foo/test_bar.py`, `benchmarks/bench_x.py`, `keras_xla_guard/seam/`
# written in a code span or link; not placeholders such as `<log_dir>/...`.
_REPO_PATH = re.compile(r"\b((?:tests|benchmarks|keras_xla_guard|notebooks)/[\w./-]*\w/?)")
_HREF = re.compile(r"""(?:href|src)="([^"]+)\"""")


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _relative_targets(markdown: str) -> list[str]:
    """Link targets outside code that are relative paths (no scheme, not only an anchor)."""
    prose = _INLINE_CODE.sub("", _FENCE.sub("", markdown))
    targets = []
    for target in _MD_LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith(("#", "/")):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def _visible_text(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", markup)).split())


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site a real `mkdocs build --strict` writes from mkdocs.yml and docs/."""
    site_dir = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return site_dir


def test_readme_is_at_most_12_kib() -> None:
    """README.md (also the package's long description) stays a front door of <= 12 KiB."""
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_LIMIT_BYTES, f"README.md is {size} bytes; move detail into docs/"


def test_long_description_is_the_readme() -> None:
    """setup.cfg publishes README.md as the Markdown long description."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["metadata"]["long_description"] == "file: README.md"
    assert cfg["metadata"]["long_description_content_type"] == "text/markdown"


def test_relative_links_in_markdown_point_to_existing_files() -> None:
    """Every relative link in README.md and docs/**/*.md names a file or folder that exists."""
    broken = []
    checked = 0
    for page in _markdown_files():
        for target in _relative_targets(page.read_text(encoding="utf-8")):
            checked += 1
            if target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
    assert checked > 50  # the link parser found the links at all


def test_repository_paths_named_in_code_spans_exist() -> None:
    """Paths to tests, benchmarks and package modules named in the Markdown exist (they move)."""
    missing = []
    checked = 0
    for page in _markdown_files():
        for path in _REPO_PATH.findall(page.read_text(encoding="utf-8")):
            checked += 1
            if not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert missing == []
    assert checked > 10


def test_relative_link_parser_skips_urls_anchors_and_code() -> None:
    """The link check sees prose links only: not URLs, bare anchors or links inside code."""
    markdown = (
        '[a](docs/a.md#x) ![b](img/b.png "t") [c](https://e.com/x) [d](#top)\n'
        "`[e](inline.md)`\n```\n[f](fenced.md)\n```\n"
    )
    assert _relative_targets(markdown) == ["docs/a.md", "img/b.png"]


def test_api_page_documents_every_public_name() -> None:
    """docs/api.md renders each name of keras_xla_guard.__all__ from the top-level package."""
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = re.findall(r"^::: keras_xla_guard\.(\w+)$", api, re.MULTILINE)
    assert sorted(documented) == sorted(n for n in keras_xla_guard.__all__ if n != "__version__")


def test_strict_build_renders_the_callbacks_docstring(site) -> None:
    """The API page shows XlaGuardCallback's summary line and its documented arguments."""
    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    summary = inspect.getdoc(keras_xla_guard.XlaGuardCallback).splitlines()[0]
    assert summary.startswith("Measures how much of")
    section = page[
        page.index('id="keras_xla_guard.XlaGuardCallback"') : page.index('id="keras_xla_guard.XlaGuard"')
    ]
    text = _visible_text(section)
    assert summary.replace("`", "") in text
    for argument in ("log_dir", "profile_epochs", "max_compilations", "on_violation"):
        assert argument in text
    assert "Defaults to" in text


def test_strict_build_anchors_every_public_name(site) -> None:
    """Every public name gets its own anchor on the API page (griffe resolved the lazy exports)."""
    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="keras_xla_guard\.(\w+)"', page))
    assert anchors == {n for n in keras_xla_guard.__all__ if n != "__version__"}


def test_quickstart_page_shows_the_notebook_with_its_outputs(site) -> None:
    """The notebook's page holds its code, the printed results and its plot as an image file."""
    page = (site / "quickstart" / "index.html").read_text(encoding="utf-8")
    text = _visible_text(page)
    assert "XlaGuardCallback" in text and "NOTEBOOK_RESULTS" in text
    assert "varied across 7 values" in text
    images = re.findall(r'<img[^>]+src="([^"]+\.png)"', page)
    assert images and all((site / "quickstart" / src).resolve().is_file() for src in images)


def test_html_report_page_shows_the_browser_screenshot(site) -> None:
    """The HTML report page embeds the screenshot the browser test saved."""
    page = (site / "html-report" / "index.html").read_text(encoding="utf-8")
    assert 'src="../images/html_report.png"' in page
    assert (site / "images" / "html_report.png").stat().st_size > 50_000


def test_built_site_links_resolve(site) -> None:
    """Every relative href/src in the built pages exists in the site, cited benchmark JSON included."""
    broken = []
    for page in site.rglob("*.html"):
        for target in _HREF.findall(page.read_text(encoding="utf-8")):
            path = html.unescape(target).split("#", 1)[0].split("?", 1)[0]
            if not path or re.match(r"^[a-z][a-z0-9+.-]*:", path, re.IGNORECASE) or path.startswith("/"):
                continue
            resolved = (page.parent / path).resolve()
            if not (resolved.is_file() or (resolved / "index.html").is_file()):
                broken.append(f"{page.relative_to(site)}: {target}")
    assert broken == []
    cited = re.findall(
        r"\.\./benchmarks/results/([\w.-]+\.json)",
        (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8"),
    )
    assert cited, "docs/benchmarks.md cites no saved result"
    for name in cited:
        assert (site / "benchmarks" / "results" / name).read_bytes() == (
            ROOT / "benchmarks" / "results" / name
        ).read_bytes()


def test_demo_and_install_docs_use_the_profile_extra() -> None:
    """The `profile` extra brings xprof; `make demo`'s venv and the documented install use it."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    profile = cfg["options.extras_require"]["profile"].split()
    assert any(req.startswith("xprof") for req in profile)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    demo_venv = makefile[makefile.index("$(VENV)/.installed:") : makefile.index("touch $@")]
    (extras,) = re.findall(r'-e "\.\[([\w,]+)\]"', demo_venv)
    assert "profile" in extras.split(",")
    for page in ("README.md", "docs/getting-started.md"):
        assert 'pip install "keras-xla-guard[cpu,profile]"' in (ROOT / page).read_text(encoding="utf-8")


# `from keras_xla_guard.<module> import ...` or `keras_xla_guard.<module>.<name>`
# in user-facing text; `python -m keras_xla_guard.<module>` runs a command.
_INTERNAL_IMPORT = re.compile(r"(?<!-m )\bkeras_xla_guard\.(\w+)(?:\.\w+)*(?: import|\.\w+\()")


def _user_facing_texts() -> dict[str, str]:
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in _markdown_files()}
    for path in sorted((ROOT / "examples").glob("*.py")) + [ROOT / "notebooks" / "quickstart.ipynb"]:
        texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return texts


def test_user_facing_code_imports_only_the_public_api():
    """README, docs, examples and the notebook import names from `keras_xla_guard` itself, never from its modules."""
    found = {
        name: sorted({m.group(0) for m in _INTERNAL_IMPORT.finditer(text)})
        for name, text in _user_facing_texts().items()
    }
    assert {name: hits for name, hits in found.items() if hits} == {}
    assert _INTERNAL_IMPORT.search("from keras_xla_guard.signatures.data import pad_to_buckets")
    assert _INTERNAL_IMPORT.search("keras_xla_guard.distributed.worker_coverage(log_dir)")
    assert not _INTERNAL_IMPORT.search("python -m keras_xla_guard.comparison._worker")
