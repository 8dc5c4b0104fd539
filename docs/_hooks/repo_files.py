"""MkDocs hook: the built site also serves the repository files pages link to.

Pages cite files outside `docs/` (saved benchmark JSON under
`benchmarks/results/`, the notebook) with links relative to the page, so the
links work where the Markdown is read in the repository. MkDocs only knows
the files under `docs_dir` and would report those links as broken: this hook
copies each linked repository file into the site at its path relative to the
repository root and points the link there.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

# A Markdown link whose target leaves docs/: `](../path)`, no anchor.
_OUTSIDE_LINK = re.compile(r"\]\(((?:\.\./)+[^)#\s]+)\)")


def _repo_path(page_src_uri: str, target: str) -> str | None:
    """The target's path relative to the repository root, or None when it stays in docs/."""
    in_docs = posixpath.normpath(posixpath.join(posixpath.dirname(page_src_uri), target))
    if not in_docs.startswith("../") or in_docs.startswith("../../"):
        return None
    return in_docs[len("../") :]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds every non-Markdown repository file a page links to."""
    docs = Path(config.docs_dir)
    root = docs.parent
    for page in files.documentation_pages():
        for target in _OUTSIDE_LINK.findall(Path(page.abs_src_path).read_text(encoding="utf-8")):
            path = _repo_path(page.src_uri, target)
            # README.md and other Markdown would become pages of their own.
            if (
                path
                and not path.endswith(".md")
                and (root / path).is_file()
                and files.get_file_from_path(path) is None
            ):
                files.append(File(path, str(root), config.site_dir, config.use_directory_urls))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Points links at repository files to their copies in the site."""

    def relink(match: re.Match[str]) -> str:
        path = _repo_path(page.file.src_uri, match.group(1))
        if path is None or files.get_file_from_path(path) is None:
            return match.group(0)
        return f"]({posixpath.relpath(path, posixpath.dirname(page.file.src_uri) or '.')})"

    return _OUTSIDE_LINK.sub(relink, markdown)
