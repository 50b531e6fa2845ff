#!/usr/bin/env python3
"""Measure how long each stop of the course takes, write ``grader/route.json``, and render the route into the README and lesson 00.

For every stop (lessons 00–07, tasks 10–15) it measures:

* ``run_seconds``: the notebook's Run All with nbclient, in a fresh kernel, from a
  temporary copy of its folder (the instructor's source, so every exercise has an
  answer and the run does not stop), with the chosen backend and a throwaway
  progress file;
* ``words``: the words of its Markdown cells (solutions left out);
* ``questions`` and ``hands_on``: its exercises, counted from its code cells
  (``Quiz``, ``Prediction``, ``ask``, a task's "why" question; ``PolicyEditor``, an
  editable ``AgentStage``, ``AttackEditor``, a ``%%attack N`` cell, a task's policy, a task's attack).

and derives its minutes with ``route.minutes_for`` (the stated rule: reading at
``READ_WPM``, an allowance per exercise, plus the Run All time). The tables between
the ``route`` markers in README.md and lessons/00-start-here/start-here.md are then
re-rendered from the file (``route.route_markdown``) and lesson 00's notebook synced.

    .venv/bin/python bench/lesson_times.py                    # measure (static backend), write, render
    .venv/bin/python bench/lesson_times.py --backend docker   # measure with real containers
    .venv/bin/python bench/lesson_times.py --render           # re-render the tables from route.json only
    .venv/bin/python bench/lesson_times.py --check            # exit 1 if a table differs from route.json

tests/unit/course/test_route.py checks the tables against route.json, and every stop's minutes against the rule.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.course.route import (  # noqa: E402 - after the path is set
    HANDS_ON_MINUTES, QUESTION_MINUTES, READ_WPM, ROUTE_FILE, Route, load_route, minutes_for, route_markdown)

README = REPO / "README.md"
LESSON_00 = REPO / "lessons" / "00-start-here" / "start-here.md"
BEGIN = "<!-- route: rendered from grader/route.json by bench/lesson_times.py; edit there, not here -->"
END = "<!-- /route -->"

_SOLUTION = re.compile(r"### BEGIN SOLUTION.*?### END SOLUTION", re.S)
_QUESTIONS = re.compile(r"^\s*(?:\w+\s*=\s*)?(?:Quiz|Prediction|ask)\(", re.M)
_HANDS_ON = re.compile(r"^\s*(?:\w+\s*=\s*)?(?:PolicyEditor\(|AttackEditor\(|AgentStage\(.*editable=True|save_policy\(|assert_captured\()"
                       r"|^%%attack\s", re.M)  # an attack cell (lesson 07's ``%%attack N``) is an attack to write


def count(nb: Any) -> tuple[int, int, int]:
    """(words, questions, hands-on exercises) of a notebook: prose without solutions, and its exercises."""
    words = questions = hands_on = 0
    for cell in nb.cells:
        grading = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "markdown":
            if grading.get("solution") and grading.get("grade"):
                questions += 1  # a "why" question answered in Markdown
            words += len(re.findall(r"[A-Za-z0-9][\w'’.-]*", _SOLUTION.sub("", cell.source)))
        elif cell.cell_type == "code":
            questions += len(_QUESTIONS.findall(cell.source))
            hands_on += len(_HANDS_ON.findall(cell.source))
    return words, questions, hands_on


def run_all(path: Path, backend: str) -> float:
    """Seconds for the notebook's Run All in a fresh kernel, from a copy of its folder; an error stops the measurement."""
    import nbclient
    import nbformat

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "lessons" / path.parent.name
        shutil.copytree(path.parent, folder, ignore=shutil.ignore_patterns("my_policy.json", ".ipynb_checkpoints"))
        nb = nbformat.read(folder / path.name, as_version=4)  # type: ignore[no-untyped-call]
        # the kernel imports this checkout's package, whatever else the interpreter has installed
        path_env = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env = {"SANDBOX_LAB_BACKEND": backend, "SANDBOX_LAB_PROGRESS": str(Path(tmp) / "progress.json"), "PYTHONPATH": path_env}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # the kernel inherits the environment
        try:
            client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
            start = time.monotonic()
            client.execute()
            seconds = time.monotonic() - start
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            raise SystemExit(f"{path}: Run All stopped ({errors[0]['ename']}); no time measured")
        return seconds


def how(backend: str) -> str:
    """The rule, in the words lesson 00 and the README show under the table."""
    run = "with Docker" if backend == "docker" else "with the static backend (add the containers' time where you run Docker)"
    return (f"Each time is measured, then rounded up: the notebook's Run All with nbclient ({run}), plus its prose "
            f"read at {READ_WPM} words a minute, plus {QUESTION_MINUTES} min per question and {HANDS_ON_MINUTES} min per "
            "policy or attack to write (an allowance for a few runs of the editor); `bench/lesson_times.py` measures "
            "and writes these figures.")


def measure(backend: str, only: tuple[str, ...] = ()) -> dict[str, Any]:
    import nbformat

    data: dict[str, Any] = json.loads(ROUTE_FILE.read_text(encoding="utf-8"))
    for stop in data["stops"]:
        if only and stop["folder"] not in only:
            continue
        path = REPO / "lessons" / stop["folder"] / stop["notebook"]
        words, questions, hands_on = count(nbformat.read(path, as_version=4))  # type: ignore[no-untyped-call]
        seconds = round(run_all(path, backend), 1)
        stop.update(run_seconds=seconds, words=words, questions=questions, hands_on=hands_on,
                    minutes=minutes_for(seconds, words, questions, hands_on))
        stop.pop("measured_by", None)  # measured with the rest now
        print(f"{stop['folder']:32} run {seconds:6.1f} s  {words:5} words  {questions:2} questions  "
              f"{hands_on:2} hands-on  -> {stop['minutes']} min", flush=True)
    cores = os.cpu_count() or 0
    load = os.getloadavg()[1] if hasattr(os, "getloadavg") else float("nan")  # a shared machine runs slower: say so
    data["how"] = how(backend)
    machine = f"{platform.system()} {platform.machine()}, {cores} cores (load average {load:.1f} at the end)"
    today = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    if only:
        # The other stops keep the measurement they had: say which stops this one re-measured, and how.
        base = str(data["measured_with"]).split("; re-measured ")[0]
        data["measured_with"] = f"{base}; re-measured {', '.join(only)} with the {backend} backend, {machine}, {today}"
    else:
        data["measured_with"] = f"{backend} backend, {machine}, {today}"
    return data


def render(text: str, table: str, where: Path) -> str:
    """``text`` with the block between the route markers replaced by ``table``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"{where}: needs exactly one route block ({BEGIN} ... {END})")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def targets(route: Route) -> dict[Path, str]:
    return {README: route_markdown(route, links="repo"), LESSON_00: route_markdown(route, links="lab")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("static", "docker"), default="static", help="the backend the notebooks run with")
    parser.add_argument("--only", action="append", default=[], metavar="FOLDER", help="measure only this stop (repeatable)")
    parser.add_argument("--render", action="store_true", help="only re-render the tables from route.json")
    parser.add_argument("--check", action="store_true", help="exit 1 if a table differs from route.json")
    args = parser.parse_args(argv)
    if not (args.render or args.check):
        data = measure(args.backend, tuple(args.only))
        ROUTE_FILE.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    route = load_route()  # checks what was written, minutes against the rule included
    stale = []
    for path, table in targets(route).items():
        text = path.read_text(encoding="utf-8")
        new = render(text, table, path)
        if new == text:
            continue
        if args.check:
            stale.append(path)
            continue
        path.write_text(new, encoding="utf-8")
        print(f"rendered {path.relative_to(REPO)}")
        if path == LESSON_00:
            subprocess.run([sys.executable, "-m", "jupytext", "--sync", str(path)], check=True, capture_output=True)
    if stale:
        print("out of date (run bench/lesson_times.py --render):", *map(str, stale), sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
