#!/usr/bin/env python3
"""Generate the graded practice-task notebooks (nbgrader source format) from the task definitions.

One notebook per task, at ``lessons/<order>-task-<id>/task.ipynb``:

1. narrative (Markdown): the threat and the goal, and the rubric;
2. setup (locked): the task, and the backend that will judge (said aloud);
3. the learner's policy (solution cell): a starter, the reference solution
   from ``solutions/<id>.json`` written inline inside ``### BEGIN SOLUTION``
   (the instructor's source only: nbgrader strips it on release, and no
   solution helper exists in the package), then ``save_policy`` writes
   ``my_policy.json``;
4. grading (locked): one run of the policy, feedback printed;
5. one autograded cell per rubric check (``grade_id`` ``<task>-<check>``): a
   preview in the learner's kernel; at autograde time the grader's own process
   grades the policy cell and sets each cell's outcome (grader/grading/autograde.py);
6. a "why" question, graded by hand.

The capture-the-flag task (``lessons/15-task-capture-the-flag/task.ipynb``) is
made here too, from the levels (``grader/levels/``) and the reference attacks
(``solutions/attacks/<level id>.py``, inlined inside ``### BEGIN SOLUTION``): one
attack cell per level (``attack_N = r'''...'''``) and one graded cell
``assert_captured(N, attack_N)``, whose outcome the grader sets at autograde
time from its own Docker run (``autograde.grade_attacks``).

Run it after changing a task or this script (``make lessons`` does); the
notebooks are committed without outputs. ``--check`` exits 1 if a committed
notebook differs; tests/unit/project/test_lesson_pairs.py regenerates them into a
temporary directory and compares. Unlike the lessons (``lessons/0N-*``, MyST
Markdown paired with their notebooks by jupytext), a task notebook has no
text source: it derives from ``grader/tasks/<id>.json`` and this script.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.course.ladder import level as ctf_level  # noqa: E402 - after the path is set
from grader.grading.tasks import Task, all_tasks  # noqa: E402 - after the path is set

CAPTURE_ID = "capture-the-flag"
CAPTURE_FOLDER = "15-task-capture-the-flag"
CAPTURE_LEVELS = (1, 2, 3)
CAPTURE_POINTS = 2  # per level captured

# The free-text question of each task, and the answer a grader looks for.
WHY: dict[str, tuple[str, str]] = {
    "scope-secure-sandbox": (
        "Why is a Docker container with default networking not enough to sandbox this agent, and which two axes does your policy scope?",
        "Default networking lets the process connect anywhere, so whatever it can read can leave. A sandbox must scope "
        "the filesystem (what can be read and written) and the network (where data can go) independently; "
        "reads are open by default, so the policy hides the machine's places with denyRead (the home, /etc/secrets, "
        "/project, /app/workspace), re-opens /project/src with allowRead, allows writes to /project/out only and no host at all.",
    ),
    "fix-the-naive-setup": (
        "The 'secure' setup from the lesson only allows registry.npmjs.org. Why does it still let a secret leave, and why did you have to fix the filesystem axis rather than the network axis?",
        "registry.npmjs.org accepts uploads (npm publish with an account the attacker owns), and the proxy only sees the "
        "host name, not the encrypted content. Any readable secret can be published. The build needs that host, so the "
        "channel cannot be closed: the secrets have to be made unreadable. Reads are open by default, so the policy "
        "hides every place the build does not read with denyRead (the home, /etc/secrets, /project).",
    ),
    "pip-install-only": (
        "Why is \"*.pypi.org\" more dangerous than listing pypi.org, even though every pypi.org host is run by the same trusted organisation?",
        "A wildcard matches every subdomain, including upload.pypi.org, where anyone with an account can publish a "
        "package. A trusted operator does not make a host safe: what matters is whether the attacker can store data "
        "there and read it back. Exact host names keep the download-only hosts and nothing else.",
    ),
    "stop-persistence": (
        "Why is a writable .git/hooks or ~/.bashrc an escape from the sandbox, even though nothing runs there during the agent's session?",
        "Those files run later, outside the sandbox, with the user's full rights and network: the hook at the next git "
        "commit, .bashrc in the next shell. Writing them plants code that the sandbox never sees run. Granting writes "
        "only to /project/src and /project/out, the two places the job needs, leaves .git (whose config can also point "
        "at other hooks), the home directory and every other start-up file read-only.",
    ),
    "deny-inside-allow": (
        "The starter denied writing /project/.env and allowed reading /project. Why did that not protect the API token, and what hides it?",
        "Reading is what leaks a secret: denyWrite only stops changes, the agent could still read the token and use or "
        "send it. The starter's allowRead hid nothing either: reads are open by default, and allowRead only re-opens "
        "paths inside a denyRead. A denyRead of /project/.env hides the file while the rest of /project stays readable; "
        "only an allowRead of that very file would re-open it.",
    ),
}


def _meta(grade_id: str, *, grade: bool = False, solution: bool = False, locked: bool = True, points: int = 0) -> dict[str, object]:
    """nbgrader cell metadata, schema version 3."""
    md: dict[str, object] = {
        "grade": grade, "grade_id": grade_id, "locked": locked,
        "schema_version": 3, "solution": solution, "task": False,
    }
    if grade:
        md["points"] = points
    return {"nbgrader": md}


def _policy_text(policy: object) -> str:
    return json.dumps(policy, indent=2)


def build(task: Task) -> nbformat.NotebookNode:
    tid = task.id
    rubric = "\n".join(f"| `{c.id}` | {c.points} | {c.description} |" for c in task.checks)
    starter = task.starter if task.starter is not None else {"filesystem": {}, "network": {}}
    starter_note = (
        "It starts from the policy given in the task." if task.starter is not None
        else "It starts from an empty policy: write yours from scratch."
    )
    question, answer = WHY[tid]
    cells = [
        new_markdown_cell(
            f"# Practice task: {task.title}\n\n"
            f"{task.statement}\n\n"
            f"**What the job needs:** it {task.needs.in_words()}. Anything your policy grants beyond that costs points.\n\n"
            f"**How it is graded.** Your policy is run against the probe suite: attacks a compromised agent would try, "
            f"and the legitimate job; and every path and host it grants is compared with the job's needs. Each rubric line is worth points ({task.max_score} in all, plus a question at the end):\n\n"
            f"| check | points | what it needs |\n|---|---|---|\n{rubric}\n",
            metadata=_meta(f"{tid}-intro"),
        ),
        new_code_cell(
            "from grader.backends import default\n"
            "from grader.grading.notebook import assert_passed, grade_file, save_policy, start_task\n\n"
            f'TASK = start_task("{tid}")\n'
            "backend = default()  # docker where an engine answers, otherwise the static prediction\n"
            'print(f"Grading backend: {backend.name}")',
            metadata=_meta(f"{tid}-setup"),
        ),
        new_markdown_cell(
            "## Your policy\n\n"
            f"Edit the JSON below, delete the two lines `# YOUR CODE HERE` and `raise NotImplementedError()`, then run the cell. {starter_note} "
            "The cell saves your policy to `my_policy.json` and says whether it is valid.",
            metadata=_meta(f"{tid}-policy-intro"),
        ),
        new_code_cell(
            f'policy_json = r"""\n{_policy_text(starter)}\n"""\n'
            "### BEGIN SOLUTION\n"
            f'policy_json = r"""\n{_reference(tid)}\n"""\n'
            "### END SOLUTION\n"
            'save_policy("my_policy.json", policy_json)',
            metadata=_meta(f"{tid}-policy", solution=True, locked=False),
        ),
        new_markdown_cell(
            "## Grade\n\nThe next cell runs your policy once and explains every lost point: the probe, the evidence and a fix. "
            "The cells after it award the points, one rubric line each.",
            metadata=_meta(f"{tid}-grade-intro"),
        ),
        new_code_cell(
            'result = grade_file(TASK, "my_policy.json", backend)\nprint(result)',
            metadata=_meta(f"{tid}-grade"),
        ),
    ]
    for c in task.checks:
        # feedback only: at autograde time the grader sets these cells' outcomes (grader/grading/autograde.py)
        cells.append(new_code_cell(
            f'assert_passed(result, "{c.id}")',
            metadata=_meta(task.grade_id(c.id), grade=True, points=c.points),
        ))
    cells += [
        new_markdown_cell(f"## Why?\n\n{question}", metadata=_meta(f"{tid}-why-question")),
        new_markdown_cell(
            f"### BEGIN SOLUTION\n{answer}\n### END SOLUTION",
            metadata=_meta(f"{tid}-why", grade=True, solution=True, locked=False, points=2),
        ),
    ]
    for cell in cells:
        cell["id"] = str(cell.metadata["nbgrader"]["grade_id"])[-64:]  # stable ids: regenerating changes nothing
    nb = new_notebook(cells=cells)
    nb.metadata = {
        # lessons/jupytext.toml pairs every notebook under lessons/ with a .md; a task is generated, not
        # edited, and a task.md beside it would be released by nbgrader with the solution in it.
        "jupytext": {"formats": "ipynb"},
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return nb


def _finish(cells: list[nbformat.NotebookNode]) -> nbformat.NotebookNode:
    for cell in cells:
        cell["id"] = str(cell.metadata["nbgrader"]["grade_id"])[-64:]  # stable ids: regenerating changes nothing
    nb = new_notebook(cells=cells)
    nb.metadata = {
        "jupytext": {"formats": "ipynb"},  # generated, never paired (see build)
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return nb


def build_capture() -> nbformat.NotebookNode:
    """The capture-the-flag task: an attack per level, each verified by the grader's own run at autograde time."""
    total = CAPTURE_POINTS * len(CAPTURE_LEVELS)
    cells = [
        new_markdown_cell(
            "# Practice task: capture the flag\n\n"
            f"Capture levels {CAPTURE_LEVELS[0]} to {CAPTURE_LEVELS[-1]} of the ladder (lesson 07). For each level, write "
            "Python that runs as the agent's tool would, inside that level's sandbox, and gets the flag out to a place "
            "the attacker can read: their server, a gist, a published package, their nameserver.\n\n"
            f"**How it is graded** ({CAPTURE_POINTS} points per level, {total} in all). When your notebook is graded, "
            "Sandbox Lab runs each attack again in its own Docker sandbox, outside your kernel, with a fresh flag your "
            "notebook never saw. A level counts only if the simulated internet's logs show that flag arriving at such a "
            "sink; what your code prints earns nothing. Below, each graded cell runs your attack once now, as feedback.",
            metadata=_meta(f"{CAPTURE_ID}-intro"),
        ),
        new_code_cell("from grader.grading.notebook import assert_captured", metadata=_meta(f"{CAPTURE_ID}-setup")),
    ]
    for n in CAPTURE_LEVELS:
        lv = ctf_level(n)
        reference = (REPO / "solutions" / "attacks" / f"{lv.id}.py").read_text(encoding="utf-8").strip()
        cells += [
            new_markdown_cell(
                f"## Level {n}: {lv.title}\n\n{lv.story}\n\nThe sandbox:\n\n```\n{lv.sandbox_text()}\n```\n\n"
                "Write your attack between the quotes, delete the two lines `# YOUR CODE HERE` and "
                "`raise NotImplementedError()`, then run the cell and the one after it.",
                metadata=_meta(f"{CAPTURE_ID}-l{n:02d}-story"),
            ),
            new_code_cell(
                f"attack_{n} = r'''\n# your attack on level {n}\n'''\n"
                "### BEGIN SOLUTION\n"
                f"attack_{n} = r'''\n{reference}\n'''\n"
                "### END SOLUTION",
                metadata=_meta(f"{CAPTURE_ID}-l{n:02d}-attack", solution=True, locked=False),
            ),
            new_code_cell(
                f"assert_captured({n}, attack_{n})",
                metadata=_meta(f"{CAPTURE_ID}-l{n:02d}-captured", grade=True, points=CAPTURE_POINTS),
            ),
        ]
    return _finish(cells)


def _reference(task_id: str) -> str:
    """The reference solution, inlined into the instructor's source notebook only (nbgrader strips it on release)."""
    return (REPO / "solutions" / f"{task_id}.json").read_text(encoding="utf-8").strip()


def notebook_path(task: Task, lessons: Path = REPO / "lessons") -> Path:
    return lessons / f"{task.order:02d}-task-{task.id}" / "task.ipynb"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed notebook is out of date")
    parser.add_argument("--lessons", type=Path, default=REPO / "lessons",
                        help="the course's source directory to write (or check) the notebooks in (default: lessons/)")
    args = parser.parse_args(argv)
    stale = []
    made = [(build(task), notebook_path(task, args.lessons)) for task in all_tasks()]
    made.append((build_capture(), args.lessons / CAPTURE_FOLDER / "task.ipynb"))
    for nb, path in made:
        nbformat.validate(nb)
        text = nbformat.writes(nb) + "\n"
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    if stale:
        print("out of date (run scripts/make_task_notebooks.py):", *map(str, stale), sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
