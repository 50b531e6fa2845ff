"""Capture the flag in a real code cell: the ``%%attack N`` cell magic, so the attack gets the editor's highlighting,
indentation and Tab.

The cell's text is never run in the kernel: the magic hands it, as a string,
to the ladder (``notebook.ladder_widgets.AttackEditor.run`` → ``ladder.attack``), which
runs it in the level's sandbox with a fresh flag. What the cell shows is the
editor's view without its text area and button: the level, then where the
flag went or a hint. Rerun the cell to attack again.

    %%attack 3
    key = open("/home/user/.ssh/id_rsa").read()
    ...

    %%attack capstone --policy my_policy.json (the last level: your policy for its job)

    %%attack 3 --solution (shows level 3's worked solution instead of running the cell; recorded as asked)

No number of misses reveals a level's answer: the hints are nudges, and the
solution is shown only when asked, with ``--solution`` (or the editor's
button), and the asking is recorded for the progress board (``course.reveals``).
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Optional

import ipywidgets as W

from grader.backends import Backend
from grader.core.errors import LevelError, SandboxLabError
from grader.core.policy import load_policy
from grader.core.text import text_problem
from grader.course.ladder import STATIC_CANNOT_ATTACK
from grader.notebook.ladder_widgets import AttackEditor
from grader.notebook import palette

__all__ = ["MAGIC_NAME", "AttackCell", "attack_cell", "parse_line", "register_attack_magic"]

MAGIC_NAME = "attack"


@dataclass(frozen=True)
class AttackCell:
    """What the magic's line says: the level (number or id) and, for the capstone, the learner's policy file."""

    level: str
    policy: Optional[str] = None
    solution: bool = False  # show the level's worked solution instead of running the cell


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit the kernel: say it as a usage problem instead
        raise LevelError(f"%%{MAGIC_NAME}: {message}. Write %%{MAGIC_NAME} N (a level's number), or "
                         f"%%{MAGIC_NAME} capstone --policy my_policy.json for the capstone "
                         f"(add --solution to see a level's worked solution instead).")


def parse_line(line: str) -> AttackCell:
    """``"3"`` → level 3; ``"capstone --policy p.json"`` → the capstone under p.json; ``"3 --solution"`` → level 3's
    worked solution, asked for; ``LevelError`` saying the usage."""
    parser = _Parser(prog=f"%%{MAGIC_NAME}", add_help=False)
    parser.add_argument("level")
    parser.add_argument("--policy", default=None)
    parser.add_argument("--solution", action="store_true")
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise LevelError(f"%%{MAGIC_NAME}: cannot read the line ({exc})") from None
    ns = parser.parse_args(words)
    return AttackCell(str(ns.level), ns.policy, bool(ns.solution))


def attack_cell(line: str, cell: str, *, backend: Optional[Backend] = None, record_progress: bool = True) -> AttackEditor:
    """Run the cell's text as an attack on the line's level, in its sandbox, and return the view of what happened.

    The editor's text area and button are hidden: the code cell is the editor, and rerunning it attacks again.
    A cell with nothing but comments runs nothing (no attempt spent), and neither does one on the static backend,
    which cannot run code: each says so. With ``--solution`` the cell is not run either: the level's worked
    solution is shown, and that the learner asked is recorded (with ``record_progress``)."""
    for what, text in (("line", line), ("cell", cell)):
        bad = text_problem(text)
        if bad:  # the one text check every boundary makes: said in the cell, before anything runs
            raise LevelError(f"%%{MAGIC_NAME}: the {what} {bad}")
    spec = parse_line(line)
    blank = not any(ln.strip() and not ln.strip().startswith("#") for ln in cell.splitlines())
    policy = load_policy(spec.policy) if spec.policy and not blank and not spec.solution else None  # the capstone's, once there is an attack
    editor = AttackEditor(spec.level, cell, backend=backend, record_progress=record_progress, policy=policy)
    editor.text.layout.display = "none"
    editor.button.layout.display = "none"
    if spec.solution:
        editor.show_solution()  # asked for: no attempt spent, the cell's attack not run
    elif blank:
        # nothing written yet (Run All on a fresh notebook): no attempt is spent and no hint given away
        editor.view.value = _note("Write your attack in this cell, below the first line, then run the cell.")
    elif backend is not None and backend.name == "static":
        editor.view.value = _note(f"Not run here: {STATIC_CANNOT_ATTACK}")
    else:
        editor.run()
    return editor


def _note(text: str) -> str:
    return f'<p class="sl-attack-not-run" style="color:{palette.GREY}">{palette.h(text)}</p>'


def register_attack_magic(backend: Optional[Backend] = None, ipython: Any = None) -> Callable[[str, str], Any]:
    """Register ``%%attack`` in the running IPython (or ``ipython``); every cell runs on ``backend`` (default: chosen
    on the first attack). Returns the magic's function (what a test calls without a kernel)."""
    chosen: dict[str, Optional[Backend]] = {"backend": backend}

    def attack(line: str, cell: str) -> Any:
        try:
            editor = attack_cell(line, cell, backend=chosen["backend"])
        except SandboxLabError as exc:  # a bad line, a missing policy file: said in the cell, never a traceback
            return W.HTML(palette.failed_html(str(exc)))
        chosen["backend"] = editor.backend  # the engine the first attack picked serves the next ones
        return editor

    if ipython is None:
        from IPython import get_ipython

        ipython = get_ipython()
    if ipython is not None:
        ipython.register_magic_function(attack, magic_kind="cell", magic_name=MAGIC_NAME)
    return attack
