"""The course's route: every stop (lessons 00–07, tasks 10–15) in order, what the learner does there, and its measured time.

One source of truth for the times: ``grader/route.json``, written by
``bench/lesson_times.py`` from measurements (each notebook's Run All with
nbclient, its words read at a stated rate, a stated allowance per exercise).
The README's lesson table and lesson 00's route are rendered from it
(``route_markdown``) and a test checks that both show exactly that;
``progress.LESSONS`` takes its lessons and minutes from here.

Parsed strictly like every data file: an unknown key or a wrong type is a ``RouteError``
with its JSON path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from grader.core.errors import Problem, SandboxLabError, field_problem, json_pointer

__all__ = [
    "HANDS_ON_MINUTES",
    "LESSONS",
    "QUESTION_MINUTES",
    "READ_WPM",
    "ROUTE_FILE",
    "Route",
    "RouteError",
    "Stop",
    "load_route",
    "minutes_for",
    "route_markdown",
    "total_minutes",
]

ROUTE_FILE = Path(__file__).resolve().parent.parent / "route.json"

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)

# The rule that turns measurements into a stop's time (said to the learner in the route's ``how``).
READ_WPM = 200  # words of prose a minute: a common figure for reading technical text on screen
QUESTION_MINUTES = 1  # answering one question and reading its feedback
HANDS_ON_MINUTES = 4  # one policy or attack written and run until it passes: a few runs of the editor


def minutes_for(run_seconds: float, words: int, questions: int, hands_on: int) -> int:
    """A stop's minutes: its Run All time, its words at ``READ_WPM``, and the allowances per exercise, rounded up."""
    seconds = run_seconds + words * 60 / READ_WPM + 60 * (questions * QUESTION_MINUTES + hands_on * HANDS_ON_MINUTES)
    return max(1, math.ceil(seconds / 60))


class RouteError(SandboxLabError, ValueError):
    """The route file cannot be used (every problem with its JSON path)."""


class Stop(BaseModel):
    """One stop on the route: a lesson or a task notebook, and how long it took to work through."""

    model_config = _STRICT
    folder: str = Field(description='the assignment folder, e.g. "02-naive-vs-secure" (at the root of the learner lab)')
    notebook: str = Field(description='the notebook in that folder, e.g. "naive-vs-secure.ipynb"')
    item: Optional[str] = Field(description='the progress item id finishing it records, e.g. "l02-naive-vs-secure" or '
                                 '"task:pip-install-only"; null where its parts record instead (the capture-the-flag task: its levels)')
    kind: Literal["lesson", "task"] = Field(description='"lesson" (00-07) or "task" (graded, 10 and up)')
    title: str = Field(description="the title a learner sees")
    does: str = Field(description="what the learner does there, in one line")
    needs: str = Field(description='what it needs to run for real, e.g. "Docker (or static)"')
    run_seconds: float = Field(ge=0, allow_inf_nan=False, description="the notebook's measured Run All time (nbclient)")
    words: int = Field(ge=0, description="the words of its Markdown cells")
    questions: int = Field(ge=0, description="its questions (quizzes, predictions, graded and why questions)")
    hands_on: int = Field(ge=0, description="its hands-on exercises (a policy to write until it passes, an attack to write)")
    minutes: int = Field(ge=1, description="the time it takes, by ``minutes_for`` (a hand-written figure is refused)")
    measured_by: str = Field(default="", description="set when this stop's Run All was measured apart from the route "
                             "(the command, backend, machine, load and date); empty: as the route's ``measured_with`` says")

    @model_validator(mode="after")
    def _measured(self) -> "Stop":
        # the time is derived, never typed: a figure that disagrees with its own measurements is refused
        want = minutes_for(self.run_seconds, self.words, self.questions, self.hands_on)
        if self.minutes != want:
            raise ValueError(f"minutes is {self.minutes}, but its measurements give {want} (minutes_for); rerun bench/lesson_times.py")
        return self


class Route(BaseModel):
    """The whole route and how its times were obtained."""

    model_config = _STRICT
    version: Literal[1] = Field(description="the file format, 1")
    how: str = Field(description="how the times were obtained, in words a learner reads")
    measured_with: str = Field(description="the backend, machine and date of the measurement")
    stops: tuple[Stop, ...] = Field(description="every stop, in the order a learner takes them")

    def stop(self, folder: str) -> Stop:
        """The stop in ``folder``; ``KeyError`` if the route has none."""
        for s in self.stops:
            if s.folder == folder:
                return s
        raise KeyError(folder)

    def lessons(self) -> tuple[Stop, ...]:
        return tuple(s for s in self.stops if s.kind == "lesson")


def load_route(path: Optional[Path] = None) -> Route:
    """Read and check the route (the packaged ``route.json`` unless ``path`` is given)."""
    p = path or ROUTE_FILE
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RouteError(f"{p}: byte {exc.start} is not UTF-8.") from None
    except OSError as exc:
        raise RouteError(f"{p}: cannot be read ({exc.strerror}).") from None
    try:
        return Route.model_validate_json(text)  # JSON mode: strict types, a JSON array for the tuple
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            loc = tuple(e["loc"])
            ptr = json_pointer(loc)
            if e["type"] in ("extra_forbidden", "missing") and loc:
                model = Stop if len(loc) == 3 and loc[0] == "stops" else (Route if len(loc) == 1 else None)
                problems.append(field_problem(ptr, str(e["type"]), str(loc[-1]), model))
            else:
                problems.append(Problem(ptr, str(e["msg"]) + "."))
        n = len(problems)
        head = f"{p} is not a valid route ({n} problem{'s' if n != 1 else ''}); rerun bench/lesson_times.py or fix these places"
        raise RouteError("\n".join([head, *(f"  {pr}" for pr in problems)])) from None


def total_minutes(route: Route, kind: Optional[str] = None) -> int:
    """The minutes of every stop (of one ``kind`` when given)."""
    return sum(s.minutes for s in route.stops if kind is None or s.kind == kind)


def _hours(minutes: int) -> str:
    h, m = divmod(minutes, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


def route_markdown(route: Route, *, links: Literal["lab", "repo"]) -> str:
    """The route as a Markdown table and its total, as lesson 00 (``links="lab"``) and the README (``"repo"``) show it.

    In the learner lab every folder sits at the root, beside lesson 00's own, so a lesson links to
    ``../<folder>/<notebook>``; the README links into ``lessons/``. Both show the same rows and times.
    """
    rows = ["| # | stop | what you do | time | needs |", "|---|---|---|---|---|"]
    for s in route.stops:
        target = f"../{s.folder}/{s.notebook}" if links == "lab" else f"lessons/{s.folder}/{s.notebook}"
        rows.append(f"| {s.folder[:2]} | [{s.title}]({target}) | {s.does} | {s.minutes} min | {s.needs} |")
    lessons, tasks = total_minutes(route, "lesson"), total_minutes(route, "task")
    rows += ["", f"In all about **{_hours(lessons + tasks)}**: {_hours(lessons)} for the lessons, "
             f"{_hours(tasks)} for the graded tasks. {route.how} Measured with the {route.measured_with}."
             + "".join(f" Stop {s.folder[:2]}'s Run All ({s.run_seconds:.0f} s) was measured apart: {s.measured_by}."
                       for s in route.stops if s.measured_by)]
    return "\n".join(rows)


# every lesson as (id, title, minutes), in the route's order: the lesson ids a question, a goal and the progress
# record name (read here, so a rule about lessons never imports the progress record and its HTTP client)
LESSONS: tuple[tuple[str, str, int], ...] = tuple((s.item or s.folder, s.title, s.minutes) for s in load_route().lessons())
