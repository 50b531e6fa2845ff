"""The learner's copy of a lesson: nbgrader's ``ClearSolutions`` step, where an instructor's key leaves no stub.

nbgrader replaces every solution region with its code stub (``# YOUR CODE HERE``
and ``raise NotImplementedError()``), telling the learner to write something
there. A lesson's answers cell needs a region too (nbgrader replaces a solution
cell without one whole), but it holds the instructor's key, not an exercise:
the learner writes their letters on the lines above it. Lesson 05 once showed
the stub inside its ``if False:`` key, under "nothing to write here". A region
whose first line carries ``KEY_MARK`` (``### BEGIN SOLUTION (key)``) is removed
from the learner's copy with nothing in its place; every other region gets
nbgrader's stub as before.

The region must hold whole statements, so the cell runs as the learner sees
it. ``nbgrader_config.py`` puts this step where nbgrader's own runs, in
nbgrader's order. Imports nothing of the package.
"""

from __future__ import annotations

import re
from typing import Any

from nbgrader.preprocessors import ClearSolutions as NbgraderClearSolutions

__all__ = ["KEY_MARK", "ClearSolutions"]

# What follows BEGIN SOLUTION on a key's first line: the learner's copy keeps nothing of the region.
KEY_MARK = "(key)"


class ClearSolutions(NbgraderClearSolutions):  # type: ignore[misc]
    """nbgrader's ``ClearSolutions``, except that a region marked ``KEY_MARK`` is removed without a stub."""

    def _replace_solution_region(self, cell: Any, language: str) -> bool:
        lines = str(cell.source).split("\n")
        if not any(self.begin_solution_delimeter in ln and KEY_MARK in ln for ln in lines):
            return bool(super()._replace_solution_region(cell, language))
        stub = (self.code_stub[language] if cell.cell_type == "code" else self.text_stub).split("\n")
        kept: list[str] = []
        inside = False
        for line in lines:
            if self.begin_solution_delimeter in line:
                if inside:  # nbgrader's own errors, in nbgrader's words
                    raise RuntimeError("encountered nested begin solution statements")
                inside = True
                if KEY_MARK not in line:
                    indent = re.match(r"\s*", line).group(0)  # type: ignore[union-attr]
                    kept.extend(indent + s for s in stub)
            elif self.end_solution_delimeter in line:
                inside = False
            elif not inside:
                kept.append(line)
        if inside:
            raise RuntimeError("no end solution statement found")
        cell.source = "\n".join(kept).rstrip("\n")
        return True
