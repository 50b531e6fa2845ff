"""A submission as received: its structure checked against the released assignment, and its policy file read safely.

nbgrader trusts the notebook a learner hands back: a grade cell it cannot find
is simply not scored, a cell whose metadata is broken aborts the run for the
whole class, and a rubric cell's score is whatever its outputs say. Sandbox
Lab's autograde step therefore compares every submission with the released
assignment *before* any learner code runs, and everything it finds is a
``Deviation`` that scores 0 on what it affects, with the reason.

Each check, and the submission that games it (its threat):

* **present exactly once**: the learner deletes the policy cell and puts a plain
  code cell in its place (no nbgrader metadata) that defines ``policy_json`` and
  rebinds ``assert_passed`` to a no-op; the grader cannot find the policy and the
  kernel decides every rubric cell. Or duplicates a rubric cell, so nbgrader's
  ``DeduplicateIds`` strips one copy's metadata and the next step aborts the run
  for every student after it. A missing graded cell is put back (with its
  released source, so nbgrader scores it) and a missing or duplicated answer
  cell zeroes every rubric cell that reads it.
* **same metadata** (``grade``, ``solution``, ``task``, ``locked``, ``points``,
  cell type): the learner turns a rubric cell into markdown (nbgrader turns it
  back into a code cell with no outputs, which scores full points), raises its
  points, or unlocks a hidden-test cell to edit it.
* **same content for locked cells** (the released checksum, from nbgrader's
  gradebook): the learner edits a locked test cell.
* **same order**: the learner moves the policy cell below the rubric cells, so
  the kernel grades a file written earlier while the cell holds something else.
* **nothing unknown claims to be graded**: a cell with nbgrader metadata the
  release does not have (an invented ``grade_id``, a malformed record) is
  stripped of it, so it can neither score nor crash nbgrader for the class.

Cells graded by hand (the markdown "why" answers) are listed like the rest but
not zeroed here: a human awards them, and nbgrader already restores their
points and type. A missing one is put back as released, which nbgrader scores 0.

``read_policy_file`` reads ``my_policy.json`` only as a regular file directly
inside the submission: a symbolic link (to a classmate's file), a directory, a
FIFO (which would hang the grader), a file over 1 MB or one that is not UTF-8
is refused with a reason, never followed. Nothing here executes learner code:
policies are parsed with ``json`` downstream, cells with ``ast``.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional

import nbformat
from nbformat import NotebookNode

from grader.core.capped import NotRegular, TooLarge, read_regular
from grader.grading.batch import MAX_SUBMISSION_BYTES

__all__ = [
    "Deviation",
    "DeviationCode",
    "Expected",
    "Reference",
    "Structure",
    "SubmittedFile",
    "check_structure",
    "read_policy_file",
    "read_submitted",
    "reference_of",
    "zeroed",
]

FLAGS = ("grade", "solution", "task", "locked")
POLICY_FILE = "my_policy.json"


@dataclass(frozen=True)
class Expected:
    """One cell of the released assignment that carries nbgrader metadata, as released."""

    grade_id: str
    cell_type: str
    grade: bool
    solution: bool
    task: bool
    locked: bool
    points: Optional[float]  # grade cells only
    metadata: Mapping[str, Any]  # the released nbgrader record, copied onto the submitted cell

    @property
    def autograded(self) -> bool:
        """A rubric cell whose score nbgrader takes from its outputs (Sandbox Lab writes them)."""
        return self.grade and not self.solution and self.cell_type == "code"


@dataclass(frozen=True)
class Reference:
    """The released assignment's graded structure: its cells in order, their released text, and what depends on what."""

    cells: tuple[Expected, ...]
    released: Mapping[str, tuple[str, str]]  # grade_id → (released source, nbgrader checksum), from the gradebook
    affects: Mapping[str, frozenset[str]]  # grade_id → the rubric cells a deviation of this cell scores 0

    def by_id(self) -> dict[str, Expected]:
        return {e.grade_id: e for e in self.cells}


# What a deviation is, as code reads it (its ``problem`` says it to people): a cell not in the released
# assignment, one that appears twice, has another cell type, other nbgrader metadata, was edited while locked,
# is missing, or was moved; "not-checked" when the structure check never ran on the notebook.
DeviationCode = Literal["not-released", "duplicated", "cell-type", "metadata", "edited", "missing", "moved", "not-checked"]


@dataclass(frozen=True)
class Deviation:
    """One way a submission differs from the released assignment, and the rubric cells it scores 0."""

    grade_id: str
    problem: str  # for people; code reads ``code``
    affects: frozenset[str]
    code: DeviationCode

    def to_json(self) -> dict[str, Any]:
        return {"grade_id": self.grade_id, "problem": self.problem, "affects": sorted(self.affects)}

    def __str__(self) -> str:
        return f"cell {self.grade_id!r} {self.problem}"


@dataclass(frozen=True)
class Structure:
    """The outcome of the check: the notebook brought back to the released structure, and every deviation found."""

    notebook: NotebookNode
    deviations: tuple[Deviation, ...] = field(default=())


def zeroed(deviations: tuple[Deviation, ...]) -> dict[str, list[str]]:
    """rubric grade_id → every reason it scores 0."""
    out: dict[str, list[str]] = {}
    for d in deviations:
        for gid in sorted(d.affects):
            out.setdefault(gid, []).append(str(d))
    return out


def _nbgrader(cell: Any) -> Any:
    md = cell.get("metadata", {})
    return md.get("nbgrader") if isinstance(md, Mapping) else None


def reference_of(
    source: NotebookNode,
    released: Mapping[str, tuple[str, str]],
    reads: Callable[[str], Optional[set[str]]],
) -> Reference:
    """The graded structure of a source notebook (the instructor's, before release).

    Args:
        released: grade_id → (released source, checksum), as nbgrader's gradebook recorded them at release.
        reads: the names of answer variables a rubric cell's source reads (``None``: unknown, so it depends on
            every code answer cell: a policy-task rubric cell reads the policy cell's result).
    """
    cells: list[Expected] = []
    sources: dict[str, str] = {}
    for cell in source.cells:
        md = _nbgrader(cell)
        if not isinstance(md, Mapping) or not isinstance(md.get("grade_id"), str):
            continue
        if not any(md.get(f) for f in FLAGS):
            continue
        gid = md["grade_id"]
        meta = {k: v for k, v in md.items() if k != "checksum"}
        points = float(md["points"]) if md.get("grade") else None
        cells.append(Expected(gid, cell.cell_type, bool(md.get("grade")), bool(md.get("solution")), bool(md.get("task")),
                              bool(md.get("locked")), points, meta))
        sources[gid] = cell.source
    missing = [e.grade_id for e in cells if e.grade_id not in released]
    if missing:
        raise LookupError(f"the gradebook has no released version of {missing}: rerun nbgrader generate_assignment")
    answers = {e.grade_id: _assigned(sources[e.grade_id]) for e in cells if e.solution and e.cell_type == "code"}
    affects: dict[str, frozenset[str]] = {}
    for e in cells:
        own = {e.grade_id} if e.grade else set()
        if e.grade_id in answers:
            for r in cells:
                if r.autograded:
                    names = reads(sources[r.grade_id])
                    if names is None or names & answers[e.grade_id]:
                        own.add(r.grade_id)
        affects[e.grade_id] = frozenset(own)
    return Reference(tuple(cells), dict(released), affects)


def _assigned(source: str) -> set[str]:
    """The top-level names a cell assigns (without running it)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


def _flags(md: Mapping[str, Any], e: Expected) -> list[str]:
    problems = [f'has "{f}": {bool(md.get(f))!s} (released: {getattr(e, f)!s})' for f in FLAGS if bool(md.get(f)) != getattr(e, f)]
    if e.grade:
        try:
            points: Optional[float] = float(md.get("points"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            points = None
        if points != e.points:
            problems.append(f'has "points": {md.get("points")!r} (released: {e.points:g})')
    return problems


def _placeholder(e: Expected, released: tuple[str, str]) -> Any:
    """The released cell, put back where a submission lost it (nbgrader then records a score for it)."""
    source, checksum = released
    new = nbformat.v4.new_code_cell(source) if e.cell_type == "code" else nbformat.v4.new_markdown_cell(source)  # type: ignore[no-untyped-call]
    new.metadata["nbgrader"] = {**copy.deepcopy(dict(e.metadata)), "checksum": checksum}
    new.metadata["editable"] = not e.locked
    new.metadata["deletable"] = not (e.locked or e.grade or e.solution)
    return new


def _lcs_keep(reference: list[str], seen: list[str]) -> set[int]:
    """Indices of ``seen`` in a longest subsequence that keeps the reference order (the cells not moved)."""
    rank = {gid: i for i, gid in enumerate(reference)}
    xs = [rank[g] for g in seen]
    n = len(xs)
    best = [1] * n
    prev = [-1] * n
    for i in range(n):
        for j in range(i):
            if xs[j] < xs[i] and best[j] + 1 > best[i]:
                best[i], prev[i] = best[j] + 1, j
    keep: set[int] = set()
    i = max(range(n), key=lambda k: best[k]) if n else -1
    while i >= 0:
        keep.add(i)
        i = prev[i]
    return keep


def check_structure(nb: NotebookNode, ref: Reference) -> Structure:
    """Compare a submission with the released assignment; return it brought back to that structure, and every deviation.

    The returned notebook holds every released graded cell exactly once, with
    its released nbgrader record (so nbgrader's own checks cannot abort the run,
    and nbgrader records a score for every rubric cell); any other nbgrader
    record is removed. What each deviation affects scores 0 (``zeroed``).
    """
    expected = ref.by_id()
    counts: dict[str, int] = {}
    for cell in nb.cells:
        md = _nbgrader(cell)
        if isinstance(md, Mapping) and isinstance(md.get("grade_id"), str) and md["grade_id"] in expected:
            counts[md["grade_id"]] = counts.get(md["grade_id"], 0) + 1

    deviations: list[Deviation] = []
    cells: list[Any] = []
    kept: set[str] = set()
    for cell in copy.deepcopy(list(nb.cells)):
        md = _nbgrader(cell)
        if md is None:
            cells.append(cell)  # the learner's own cell: allowed, never graded
            continue
        gid = md.get("grade_id") if isinstance(md, Mapping) else None
        if not isinstance(gid, str) or gid not in expected:
            del cell.metadata["nbgrader"]
            if not isinstance(md, Mapping) or any(md.get(f) for f in FLAGS):
                deviations.append(Deviation(str(gid) if gid is not None else "?",
                                            "is not in the released assignment (its nbgrader metadata was removed; it scores nothing)",
                                            frozenset(), "not-released"))
            cells.append(cell)
            continue
        e = expected[gid]
        if gid in kept:
            del cell.metadata["nbgrader"]  # only the first copy stays graded
            cells.append(cell)
            continue
        kept.add(gid)
        problems: list[tuple[DeviationCode, str]] = []
        if counts[gid] > 1:
            problems.append(("duplicated", f"appears {counts[gid]} times (released once)"))
        if cell.cell_type != e.cell_type:
            problems.append(("cell-type", f"is a {cell.cell_type} cell (released: {e.cell_type})"))
        problems += [("metadata", p) for p in _flags(md, e)]
        cell.metadata["nbgrader"] = {**copy.deepcopy(dict(e.metadata)), "checksum": ref.released[gid][1]}
        if e.locked and cell.cell_type == e.cell_type and not problems:
            from nbgrader.utils import compute_checksum

            if compute_checksum(cell) != ref.released[gid][1]:
                problems.append(("edited", "was edited (a locked cell: it must stay as released)"))
        for code, p in problems:
            deviations.append(Deviation(gid, p, ref.affects[gid], code))
        cells.append(cell)

    order = [e.grade_id for e in ref.cells]
    for i, e in enumerate(ref.cells):
        if e.grade_id in kept:
            continue
        deviations.append(Deviation(e.grade_id, "is missing (put back as released)", ref.affects[e.grade_id], "missing"))
        before = set(order[:i])
        at = 0
        for k, c in enumerate(cells):
            md = _nbgrader(c)
            if isinstance(md, Mapping) and md.get("grade_id") in before:
                at = k + 1
        cells.insert(at, _placeholder(e, ref.released[e.grade_id]))
        kept.add(e.grade_id)

    seen = [str(_nbgrader(c)["grade_id"]) for c in cells if isinstance(_nbgrader(c), Mapping)]
    inplace = _lcs_keep(order, seen)
    missing = {d.grade_id for d in deviations if d.code == "missing"}
    for k, gid in enumerate(seen):
        if k not in inplace and gid not in missing:
            deviations.append(Deviation(gid, "was moved (the released order of graded cells must stay)", ref.affects[gid], "moved"))

    out = copy.deepcopy(nb)
    out.cells = cells
    return Structure(out, tuple(deviations))


@dataclass(frozen=True)
class SubmittedFile:
    """One file read from a submission folder (``read_submitted``): its text, or why not, with a cause code."""

    text: Optional[str]
    # "read": ``text`` holds it; "absent": no such file was submitted (no answer, nothing to say);
    # "refused": it is there but was not read (a link, not a regular file, too large, unreadable, not UTF-8)
    cause: Literal["read", "absent", "refused"]
    why: str  # for people; "" when read


def read_submitted(folder: Path, name: str = POLICY_FILE) -> SubmittedFile:
    """``folder/name`` if it is a regular file directly in ``folder`` (no link anywhere), else why not.

    ``folder`` itself must not be a link either: a submission is its own
    directory, never a path into another's.
    """
    label = name
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        return SubmittedFile(None, "refused", f"the submission folder {folder} cannot be opened as a plain directory ({exc.strerror})")
    try:
        data = read_regular(name, MAX_SUBMISSION_BYTES, dir_fd=dir_fd)
    except FileNotFoundError:
        return SubmittedFile(None, "absent", f"no {label} was submitted")
    except NotRegular as exc:
        if exc.what == "a symbolic link" or exc.what.startswith("a hard link"):
            return SubmittedFile(None, "refused", f"{label} is {exc.what}; submit the file itself (links are never followed)")
        return SubmittedFile(None, "refused", f"{label} is not a regular file ({exc.what}); submit the JSON file itself")
    except TooLarge:
        return SubmittedFile(None, "refused", f"{label} is over the {MAX_SUBMISSION_BYTES}-byte limit")
    except OSError as exc:
        return SubmittedFile(None, "refused", f"{label} could not be opened ({exc.strerror})")
    finally:
        os.close(dir_fd)
    try:
        return SubmittedFile(data.decode("utf-8"), "read", "")
    except UnicodeDecodeError as exc:
        return SubmittedFile(None, "refused", f"{label} is not UTF-8 text (byte {exc.start}); save it as UTF-8 JSON")


def read_policy_file(folder: Path, name: str = POLICY_FILE) -> tuple[Optional[str], str]:
    """``read_submitted`` as ``(text, "")`` or ``(None, reason)``, for people: decide on ``read_submitted``'s cause."""
    got = read_submitted(folder, name)
    return got.text, got.why
