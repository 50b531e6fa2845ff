"""The documentation: the README a newcomer reads in a minute, and a site whose every command, path and link is real.

The README stays short (the two commands, where to go next, the route) and everything else lives in docs/,
built into one site by ``make docs`` (mkdocs.yml, ``--strict``). What these tests hold:

* every ``sandbox-lab <subcommand>`` and ``make <target>`` the README and docs/*.md name exists (a subcommand of
  the parser, a target of the Makefile);
* every repository path "How a run works" names exists, in its prose and in its diagram;
* every relative link of the README lands on a file of the checkout;
* the generated reference pages cover every subcommand, every policy key and every route of the run service;
* the site builds with no warning (a broken link or anchor, a page missing from the nav, a link out of docs/ to
  a missing file), which is what ``make docs`` runs.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
TEXTS = [README, *sorted(DOCS.rglob("*.md"))]
HOW_A_RUN_WORKS = DOCS / "how-a-run-works.md"
sys.path.insert(0, str(ROOT / "scripts"))

import docs_reference  # noqa: E402 - the renderer of the generated reference pages
import mkdocs_hooks  # noqa: E402 - the site's hooks: generated pages, links out of docs/

README_LINES = 150
# the repository's top-level directories: a backticked path that starts with one of these names a file
TOP = ("grader", "tests", "scripts", "bench", "docs", "deploy", "binder", "lessons", "solutions", "tools",
       "constraints", "examples", "hooks")


def _code(text: str) -> list[str]:
    """What the text shows as code: each inline code span, and each line of its fenced blocks."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return [ln.strip() for block in fenced for ln in block.splitlines()] + re.findall(r"`([^`\n]+)`", rest)


def _named(pattern: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in TEXTS:
        for code in _code(path.read_text(encoding="utf-8")):
            for m in re.finditer(pattern, code):
                found.setdefault(m.group(1), set()).add(path.relative_to(ROOT).as_posix())
    return found


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {t for line in re.findall(r"^([\w.$() -][^:=\n]*?)\s*::?(?!=)", text, re.M) for t in line.split()}


def test_the_readme_is_read_in_a_minute() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < README_LINES, f"README.md is {len(text.splitlines())} lines; move detail to docs/"
    assert "make lab" in text and "make test" in text and "00-start-here" in text
    for who in ("docs/tutorial.md", "docs/instructors.md", "docs/operators.md", "docs/contributing.md"):
        assert f"]({who})" in text, f"the README does not send its reader to {who}"


def test_every_relative_link_of_the_readme_lands_on_a_file() -> None:
    links = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    missing = [link for link in links if not re.match(r"^[a-z]+:", link) and not (ROOT / link).exists()]
    assert links and not missing, missing


def test_every_subcommand_the_docs_name_exists() -> None:
    named = _named(r"(?:^|[\s(])(?:\.venv/bin/)?sandbox-lab ([a-z][\w-]*)")
    known = set(docs_reference.subcommands())
    assert {"check", "probe", "grade"} <= set(named), "the pattern finds the commands the docs show"
    unknown = {name: sorted(where) for name, where in named.items() if name not in known}
    assert not unknown, f"sandbox-lab has no such subcommand (grader/cli/): {unknown}"


def test_every_make_target_the_docs_name_exists() -> None:
    named = _named(r"(?:^|[\s(])make ([a-z][\w-]*)(?![\w-])")
    targets = _make_targets()
    assert {"lab", "test", "docs", "test-fast"} <= targets and {"lab", "test", "docs"} <= set(named)
    unknown = {name: sorted(where) for name, where in named.items() if name not in targets}
    assert not unknown, f"the Makefile has no such target: {unknown}"


def test_every_path_how_a_run_works_names_exists() -> None:
    text = HOW_A_RUN_WORKS.read_text(encoding="utf-8")
    prose = [c for c in re.findall(r"`([^`\n]+)`", text) if c.split("/")[0] in TOP and "/" in c]
    diagram = re.search(r"^```text\n(.*?)^```", text, re.S | re.M)
    assert diagram, "the page draws the pipeline"
    boxed = re.findall(r"\b((?:[a-z_]+/)+(?:[a-z_*]+\.py)?)", diagram.group(1))
    paths = prose + [f"grader/{p}" for p in boxed if not p.startswith("grader/")]
    assert len(prose) > 30 and len(boxed) > 15, (prose, boxed)
    missing = sorted({p for p in paths if not list(ROOT.glob(p.rstrip("/")))})
    assert not missing, f"docs/how-a-run-works.md names paths the checkout lacks: {missing}"


def test_the_generated_reference_covers_every_command_key_and_route() -> None:
    pages = docs_reference.pages()
    assert set(pages) == set(docs_reference.PAGES)
    for name in docs_reference.subcommands():
        assert f"## `sandbox-lab {name}`" in pages["reference/cli.md"], name
    for key in ("filesystem.denyRead", "filesystem.allowRead", "filesystem.allowWrite", "filesystem.denyWrite",
                "network.allowedDomains", "network.deniedDomains"):
        assert f"| `{key}` |" in pages["reference/policy-schema.md"], key
    for route in docs_reference.openapi()["paths"]:
        assert f"| `{route}` |" in pages["reference/http-api.md"], route


def _page(src: str) -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(src_uri=src))


def test_a_link_out_of_docs_is_checked_and_pointed_at_the_repository(caplog: pytest.LogCaptureFixture) -> None:
    config = {"docs_dir": str(DOCS), "repo_url": "https://github.com/o/r"}
    md = "[plan](../grader/core/plan.py#L1) [tests](../tests/unit/) [page](cli.md) [web](https://x.org/a)"
    out = mkdocs_hooks.on_page_markdown(md, _page("how-a-run-works.md"), config, None)  # type: ignore[arg-type]
    assert out == ("[plan](https://github.com/o/r/blob/main/grader/core/plan.py#L1) "
                   "[tests](https://github.com/o/r/tree/main/tests/unit) [page](cli.md) [web](https://x.org/a)")
    with caplog.at_level(logging.WARNING, logger="mkdocs.plugins.sandbox_lab"):
        kept = mkdocs_hooks.on_page_markdown("[gone](../../grader/nope.py)", _page("reference/x.md"), config, None)  # type: ignore[arg-type]
    assert kept == "[gone](../../grader/nope.py)" and "does not exist" in caplog.text


@pytest.mark.slow
def test_the_site_builds_with_no_warning(tmp_path: Path) -> None:
    """``make docs``: the same build, into a directory of the test's own."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr[-4000:]
    for page in ("index.html", "tutorial/index.html", "how-a-run-works/index.html", "reference/cli/index.html",
                 "reference/policy-schema/index.html", "reference/http-api/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


def test_every_page_with_commands_is_run_by_a_test() -> None:
    """Every page of the site that shows ```sh commands has them run: by test_readme_commands (its PAGES) or by the
    test RUN_ELSEWHERE names, which reads that page. A record of commands that is not instructions is ```text."""
    source = (ROOT / "tests" / "integration" / "test_readme_commands.py").read_text(encoding="utf-8")
    pages = set(re.findall(r'"([\w-]+\.md)"', source.split("PAGES = [", 1)[1].split("]", 1)[0]))
    elsewhere = dict(re.findall(r'"([\w-]+\.md)": "([\w/.]+\.py)"', source))
    shown = {p.name for p in DOCS.rglob("*.md") if re.search(r"^```sh\b", p.read_text(encoding="utf-8"), re.M)}
    missing = sorted(shown - pages - set(elsewhere))
    assert not missing, f"pages whose commands no test runs: {missing} (add them to PAGES in test_readme_commands.py)"
    for page, test in elsewhere.items():
        assert page in (ROOT / test).read_text(encoding="utf-8"), f"{test} does not read {page}"
