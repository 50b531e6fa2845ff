"""No lesson or task presents allowRead alone as the restriction in the real tools.

In Sandbox Lab a non-empty ``allowRead`` makes everything it does not list
unreadable; in sandbox-runtime and Claude Code every read is allowed by
default and ``allowRead`` only re-allows paths inside a ``denyRead``, so
``{"allowRead": ["/project/src"]}`` alone hides nothing there. A paragraph of
a lesson or a task notebook that claims the restriction ("only these",
"everything else unreadable", "the tighter form") must say in the same
paragraph where it holds (this lab) or what the real tools do; and the first
paragraph of the course that mentions ``allowRead`` must say both.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grader.lessons.export_view import ALLOW_READ_SENTENCE

jupytext = pytest.importorskip("jupytext", reason="jupytext is in the 'lab' extra")

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("0*/*.md"))
TASKS = sorted((ROOT / "lessons").glob("1*-task-*/task.ipynb"))

CLAIM = re.compile(r"unreadable|only these|only the listed|tighter|everything (else|not listed|it does not list)"
                   r"|hides? (everything|the rest)", re.I)
IN_THE_LAB = re.compile(r"\b(in|of) (this|the) lab\b|\bSandbox Lab\b|\b(this|the) lab's\b", re.I)
REAL_RULE = re.compile(r"allowed by default|reads? everything by default|re-allows?\b", re.I)


def _paragraphs(markdown: str) -> list[str]:
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)  # code shown in a Markdown cell states no rule
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def _markdown_cells(path: Path) -> list[str]:
    if path.suffix == ".md":
        return [c.source for c in jupytext.read(path).cells if c.cell_type == "markdown"]
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "markdown"]


def misleading(paragraph: str) -> bool:
    """Does this paragraph claim allowRead restricts reads, without saying where that holds or what the real tools do?"""
    if "allowRead" not in paragraph or not CLAIM.search(paragraph):
        return False
    return not (IN_THE_LAB.search(paragraph) or REAL_RULE.search(paragraph))


# The sentences that taught the wrong rule first, as they were: the check must catch each one.
OLD = [
    "Below, the agent runs under a policy in the settings format of a sandbox runtime: `filesystem.allowRead`\n"
    "(only these paths are readable, if you list any), `denyRead` (hidden), `allowWrite` (writable; nothing\n"
    "else is), and `network.allowedDomains` (hosts its egress proxy lets through; empty means no network at all).",
    "`filesystem.denyRead` hides paths (the most specific rule wins, and a hidden path cannot be written\n"
    "either); `allowRead` is the tighter form: once it lists anything, everything not listed is unreadable.",
    "all; `allowRead` makes everything it does not list unreadable, and `\"allowedDomains\": []` means no\nnetwork.",
    "Write a sandbox policy that grants the job what it needs and nothing more: reading only /project/src "
    "(list it in allowRead: everything not listed becomes unreadable), writing only /project/out.",
    'The policy makes every secret file unreadable (`allowRead: ["/project/src"]`) and allows only `api.github.com`.',
]


@pytest.mark.parametrize("old", OLD, ids=range(len(OLD)))
def test_the_check_catches_each_claim_as_it_was(old: str) -> None:
    assert misleading(old)


def test_the_check_passes_a_qualified_claim_and_a_plain_mention() -> None:
    assert not misleading("In this lab, `allowRead` makes everything it does not list unreadable.")
    assert not misleading("`allowRead` is the tighter form: in sandbox-runtime it only re-allows inside a denyRead.")
    assert not misleading("Add /project/.env to denyRead: it is more specific than allowRead /project.")
    assert not misleading(ALLOW_READ_SENTENCE)


@pytest.mark.parametrize("path", LESSONS + TASKS, ids=lambda p: str(p.relative_to(ROOT / "lessons")))
def test_no_paragraph_presents_allow_read_alone_as_the_restriction(path: Path) -> None:
    bad = [p for cell in _markdown_cells(path) for p in _paragraphs(cell) if misleading(p)]
    assert not bad, (f"{path.relative_to(ROOT)}: say where the allowRead rule holds (in this lab) or what "
                     "sandbox-runtime and Claude Code do (reads allowed by default; allowRead re-allows inside a denyRead):\n"
                     + "\n---\n".join(bad))


def test_the_first_mention_of_allow_read_says_both_rules() -> None:
    first = next(p for path in LESSONS for cell in _markdown_cells(path) for p in _paragraphs(cell) if "allowRead" in p)
    cell = next(c for path in LESSONS for c in _markdown_cells(path) if first in c)
    assert IN_THE_LAB.search(cell) and REAL_RULE.search(cell), first
    assert "sandbox-runtime" in cell and "Claude Code" in cell, cell


def test_lesson_01s_editor_shows_the_real_tools_beside_the_policy() -> None:
    text = (ROOT / "lessons" / "01-why-sandbox" / "why-sandbox.md").read_text(encoding="utf-8")
    assert re.search(r"AgentStage\([^)]*editable=True[^)]*beside=RealToolsView", text, re.S)


def test_the_sentence_states_both_rules() -> None:
    assert IN_THE_LAB.search(ALLOW_READ_SENTENCE) and REAL_RULE.search(ALLOW_READ_SENTENCE)
    assert "sandbox-runtime" in ALLOW_READ_SENTENCE and "Claude Code" in ALLOW_READ_SENTENCE
