"""No text a learner can see teaches a read rule sandbox-runtime does not have.

The lab means by a policy what sandbox-runtime (srt) means by the same JSON:
reads are open by default, ``denyRead`` hides a path, and ``allowRead`` only
re-opens paths at or inside a ``denyRead``; on its own it hides nothing
(``{"allowRead": ["/project/src"]}`` alone leaves every file readable). There
is no rule by which the most specific read rule decides, and on the same path
``allowRead`` wins over ``denyRead``, not the deny.

Until issue 38 the lab read a non-empty ``allowRead`` as "only these are
readable" and its texts said so, qualified with "in this lab". There is no lab
dialect any more, so no qualification excuses the claim: a sentence that says
``allowRead`` restricts reads by itself, or that the most specific read rule
(or the deny) wins, fails wherever a learner reads it: the lessons (prose and
code cells), the task notebooks, the question bank, the route, the level and
task files, the teaching docs and README, and the strings the package shows
(fix texts, hints, notes; docstrings are not shown and are not read).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

jupytext = pytest.importorskip("jupytext", reason="jupytext is in the 'lab' extra")

ROOT = Path(__file__).resolve().parents[3]
LESSONS = sorted((ROOT / "lessons").glob("0*/*.md"))
TASK_NOTEBOOKS = sorted((ROOT / "lessons").glob("1*-task-*/task.ipynb"))
# docs/srt-differences.md is the record of measurements against srt (the lead's page), checked by its own tests
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "srt-differences.md") + [ROOT / "README.md"]
JSON_TEXTS = [ROOT / "grader" / "questions.json", ROOT / "grader" / "route.json",
              *sorted((ROOT / "grader" / "levels").glob("*.json")), *sorted((ROOT / "grader" / "tasks").glob("*.json"))]
PYTHON = sorted(p for p in (ROOT / "grader").rglob("*.py") if "__pycache__" not in p.parts)

# --- the check --------------------------------------------------------------------------------

_READ_RULE = re.compile(r"allowRead|denyRead|allow-?list(ed)? (of )?(paths|reads|files)|read (rule|allowlist)", re.I)

# allowRead as an allowlist: it restricts reads by itself
_ALLOW_LIST = re.compile(
    r"only (these|the listed|what (it|you) lists?\b|listed paths)"
    r"|\bonly\b[^.;:]{0,40}\b(are|is|stays?|becomes?) readable"
    r"|everything (else|not listed|it does not list|that is not listed)[^.;]{0,40}\b(unreadable|hidden)"
    r"|makes? (everything|every (secret )?file|every path)[^.;]{0,60}\b(unreadable|hidden)"
    r"|(unreadable|hidden) unless (it is )?listed"
    r"|\btighter form\b"
    r"|\bhides? (everything|the rest|all)\b(?! (under|in|inside|below) )"
    r"|\bonce it lists (anything|any path|paths)"
    r"|\blist only\b[^.;]{0,60}\bin\b[^.;]{0,6}allowRead"
    r"|\ballowRead\W{0,3} the (workspace|project|source|job)\b"
    r"|allowRead[^.;]{0,40}\b(restricts|limits) (reads|reading|what)\b",
    re.I)

# the longest or the denying rule decides a read
_SPECIFIC = re.compile(r"most specific|longest (rule|entry|one)|(deny|denyRead) wins( on the same path)?"
                       r"|an allow and a deny on the same path: deny", re.I)

# said of every rule at once, reads included
_ANY_SPECIFIC = re.compile(r"most specific( \(longest\))? (rule|one|entry) (decides|wins)|an allow and a deny on the same path: deny",
                           re.I)

# a sentence that denies the claim it quotes ("allowRead alone does not make everything else unreadable")
_NEGATED = re.compile(r"\b(does not|doesn't|do not|don't|never|nothing|no longer|is not|isn't|not by itself|"
                      r"restricts nothing|hides nothing)\b", re.I)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`*(\"'])|\n\s*[-*] |\n\s*\d+\. ", text) if s.strip()]


def _claims(pattern: re.Pattern[str], sentence: str) -> bool:
    """Does ``pattern`` match ``sentence`` somewhere not denied just before ("does not make everything unreadable")?"""
    def denied(m: re.Match[str]) -> bool:
        before = re.split(r"[:;,()]", sentence[max(0, m.start() - 30):m.start()])[-1]  # the same clause, just before
        return bool(_NEGATED.search(before))
    return any(not denied(m) for m in pattern.finditer(sentence))


def misleading(text: str) -> list[str]:
    """The sentences of ``text`` that say allowRead restricts reads by itself, or that the most specific read rule wins."""
    bad = []
    for s in _sentences(text):
        flat = re.sub(r"\s+", " ", s).strip()
        allow_list = "allowRead" in flat and _claims(_ALLOW_LIST, flat)
        specific = (_claims(_ANY_SPECIFIC, flat)
                    or (bool(_READ_RULE.search(flat)) and not re.search(r"denyWrite|deniedDomains", flat)
                        and _claims(_SPECIFIC, flat)))
        if allow_list or specific:
            bad.append(flat)
    return bad


# --- what the learner reads -------------------------------------------------------------------


def _cells(path: Path) -> list[str]:
    """Every cell's text, Markdown and code (a code cell's comments and policies are read too)."""
    if path.suffix == ".md":
        return [c.source for c in jupytext.read(path).cells]
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in nb["cells"]]


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def _json_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _json_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _json_strings(v)


def _shown_strings(path: Path) -> Iterator[str]:
    """The string literals of a module that are not docstrings: f-strings with their fields as {}."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | inner:
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def _texts(path: Path) -> list[str]:
    if path.suffix in (".md", ".ipynb") and path.parent.parent.name == "lessons":
        return [p for cell in _cells(path) for p in _paragraphs(cell)]
    if path.suffix == ".md":
        return _paragraphs(re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S))
    if path.suffix == ".json":
        return list(_json_strings(json.loads(path.read_text(encoding="utf-8"))))
    return list(_shown_strings(path))


# --- the cases it must catch, and the ones it must pass ----------------------------------------

# The sentences that taught the allowlist reading, as they were: the check must catch each one.
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

# The ones issue 38 found, qualified by "in this lab" or a parenthesis on the real tools: no longer an excuse.
FOUND = [
    "This lab's grader reads four lists: `filesystem.allowRead` (in this lab, once it lists any path, only the listed "
    "paths are readable), `denyRead` (hidden), `allowWrite` (writable; nothing else is).",
    "`filesystem.denyRead` hides paths (the most specific rule wins, and a hidden path cannot be written either); "
    "in this lab, `allowRead` is the tighter form: once it lists anything, everything not listed is unreadable.",
    "Hints: the job needs to read `/project/src` and write `/project/out`, and no host at all; in this lab, "
    "`allowRead` makes everything it does not list unreadable (in sandbox-runtime and Claude Code, reads are "
    "allowed by default and `allowRead` only re-allows inside a `denyRead`).",
    'The policy makes every secret file unreadable (in this lab, `allowRead: ["/project/src"]` hides everything '
    "else) and allows only `api.github.com`.",
    "the fix is on the filesystem axis: make the secrets unreadable (in the lab, `allowRead` the workspace).",
    "srt reads everything by default: translate with `sandbox-lab export --to srt`, which makes `allowRead` mean "
    '"only these".',
    "allowRead differs: in this lab, a policy that lists paths in allowRead makes everything else unreadable, while "
    "sandbox-runtime and Claude Code let commands read everything by default.",
    "/project/.env can be read, and the job does not need it: list only /project/src in allowRead.",
    "| `filesystem.allowRead` | paths the agent may read; once it lists anything, every path of the machine that "
    "no rule covers is unreadable | everything is readable |",
    "A rule covers its path and everything below it. Among the rules that cover a path, the most specific (longest) "
    "one decides; an allow and a deny on the same path: deny.",
    "In this lab, `allowRead` makes everything it does not list unreadable.",
    "Add /project/.env to denyRead: it is more specific than allowRead /project, and the most specific rule wins.",
]

# Right, or plain mentions: the check must let these through.
FINE = [
    "`allowRead` only re-opens paths inside a `denyRead`: on its own it hides nothing.",
    'An `allowRead` with no `denyRead` around it restricts nothing: `{"allowRead": ["/project/src"]}` alone '
    "hides nothing.",
    "Reads are open by default: `denyRead` hides a path, and `allowRead` re-opens part of a hidden region.",
    "A `denyRead` deeper than an `allowRead` stays hidden.",
    "`allowRead` does not make everything else unreadable.",
    "`denyWrite` wins over `allowWrite`, whichever is more specific.",
    "A host matched by `deniedDomains` is refused: deny wins, but a deny list is a patch.",
    "Hide the home with `denyRead`, then re-open the one project the job reads with `allowRead`.",
]


@pytest.mark.parametrize("old", OLD + FOUND, ids=range(len(OLD + FOUND)))
def test_the_check_catches_each_claim_as_it_was(old: str) -> None:
    assert misleading(old), old


@pytest.mark.parametrize("fine", FINE, ids=range(len(FINE)))
def test_the_check_passes_the_rule_as_srt_has_it_and_a_plain_mention(fine: str) -> None:
    assert not misleading(fine), fine


def _scanned() -> list[Path]:
    return [*LESSONS, *TASK_NOTEBOOKS, *JSON_TEXTS, *DOCS, *PYTHON]


@pytest.mark.parametrize("path", _scanned(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_text_a_learner_sees_teaches_a_read_rule_srt_lacks(path: Path) -> None:
    bad = [s for text in _texts(path) for s in misleading(text)]
    assert not bad, (f"{path.relative_to(ROOT)} teaches a read rule sandbox-runtime does not have. Reads are open "
                     "by default, denyRead hides, allowRead only re-opens inside a denyRead (alone it hides nothing), "
                     "and no most-specific rule decides a read:\n" + "\n---\n".join(bad))


def test_the_first_mention_of_allow_read_states_srt_s_rule() -> None:
    """The course's first paragraph naming allowRead says reads are open by default and what allowRead re-opens."""
    first = next(p for path in LESSONS for cell in _cells(path) for p in _paragraphs(cell) if "allowRead" in p)
    cell = next(c for path in LESSONS for c in _cells(path) if first in c)
    assert re.search(r"reads? (are|is) open by default|every read is allowed|readable by default", cell, re.I), cell
    assert re.search(r"re-opens?", cell) and "sandbox-runtime" in cell, cell
    assert not re.search(r"\bin this lab\b|--semantics", cell), cell


def test_no_lesson_speaks_of_a_lab_dialect_or_the_semantics_switch() -> None:
    for path in LESSONS:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"--semantics|\bSandbox Lab's rules\b|\bin this lab, `?allowRead", text), path


def test_lesson_01s_editor_shows_the_real_tools_beside_the_policy() -> None:
    text = (ROOT / "lessons" / "01-why-sandbox" / "why-sandbox.md").read_text(encoding="utf-8")
    assert re.search(r"AgentStage\([^)]*editable=True[^)]*beside=RealToolsView", text, re.S)


# --- policies the lessons run must do what their text says, under srt's rules -------------------

SECRET_READS = ("read-ssh-key", "read-cloud-credentials", "read-etc-secrets", "read-dotenv")


@pytest.mark.parametrize("gap_id", ["env-token", "ssh-agent-socket", "git-credentials", "url-to-stats-host"])
def test_lesson_06_s_demonstrations_run_under_policies_that_hide_every_secret_file(gap_id: str) -> None:
    """Lesson 06 says each demo's policy leaves no secret file readable: under srt that takes a denyRead, not allowRead alone."""
    from grader.core.analyzer import predict
    from grader.core.policy import Policy
    from grader.course.gaps import gap

    result = predict(Policy.model_validate(gap(gap_id).policy))
    readable = [p.id for p in result.probes if p.id in SECRET_READS and p.outcome == "succeeded"]
    assert not readable, f"lesson 06's {gap_id} policy leaves {readable} readable under srt's rules: hide them with denyRead"
