"""MkDocs hooks for the documentation site (mkdocs.yml ``hooks:``): the generated reference pages, and links out of docs/.

* The reference pages (the CLI's ``--help``, the policy schema, the HTTP API) are rendered at build time by
  ``scripts/docs_reference.py`` and added to the site as generated files: nothing generated is committed, so
  nothing generated can be stale.
* The tutorial's route table is rendered from ``grader/route.json`` (``route_markdown``, as the README's and
  lesson 00's are by ``bench/lesson_times.py``) where docs/tutorial.md holds ``ROUTE_SLOT``: one source, no copy.
* A page may link to a file of the repository outside docs/ (``../grader/core/plan.py``, ``../README.md``), as
  it reads on GitHub. MkDocs only knows docs/, so such a link is checked here (the file or directory must exist
  in the checkout: a missing one is a warning, which ``--strict`` makes an error) and pointed at the
  repository's copy (``repo_url``/blob/main/...). Links inside docs/, and their anchors, MkDocs checks itself
  (``validation:`` in mkdocs.yml).
"""

from __future__ import annotations

import logging
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

import docs_reference  # noqa: E402 - the renderer of the generated pages, beside this file

log = logging.getLogger("mkdocs.plugins.sandbox_lab")

# a Markdown inline link or image: ](target) or ](target "title"), target without spaces
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


ROUTE_SLOT = "<!-- route table: filled in from grader/route.json when the site is built (scripts/mkdocs_hooks.py) -->"


def route_table() -> str:
    """The route as the README shows it, its links into lessons/ made relative to docs/."""
    from grader.course.route import load_route, route_markdown

    return route_markdown(load_route(), links="repo").replace("](lessons/", "](../lessons/")


def on_files(files: Files, config: Any) -> Files:
    for path, text in docs_reference.pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def outside_target(page_src: str, target: str, docs_dir: Path) -> Path | None:
    """The repository path a relative link from ``page_src`` (a path under docs/) names, if it leaves docs/."""
    if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
        return None  # a URL, an anchor on this page, or a site-absolute path: not a file link
    path = target.split("#", 1)[0]
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page_src), path))
    if not resolved.startswith("../"):
        return None  # inside docs/: MkDocs checks it
    return (docs_dir / resolved).resolve()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if ROUTE_SLOT in markdown:
        markdown = markdown.replace(ROUTE_SLOT, route_table())
    docs_dir = Path(config["docs_dir"]).resolve()
    repo_url = str(config.get("repo_url") or "").rstrip("/")
    fences = [(m.start(), m.end()) for m in _FENCE.finditer(markdown)]

    def rewrite(m: re.Match[str]) -> str:
        if any(a <= m.start() < b for a, b in fences):
            return m.group(0)  # a link shown inside a code block is text
        target = m.group("target")
        where = outside_target(page.file.src_uri, target, docs_dir)
        if where is None:
            return m.group(0)
        try:
            rel = where.relative_to(ROOT).as_posix()
        except ValueError:
            log.warning("%s links to '%s', outside the repository", page.file.src_uri, target)
            return m.group(0)
        if not where.exists():
            log.warning("%s links to '%s' (%s), which does not exist in the repository", page.file.src_uri, target, rel)
            return m.group(0)
        anchor = "#" + target.split("#", 1)[1] if "#" in target else ""
        kind = "tree" if where.is_dir() else "blob"
        return f"]({repo_url}/{kind}/main/{rel}{anchor}{m.group('title') or ''})"

    return _LINK.sub(rewrite, markdown)
