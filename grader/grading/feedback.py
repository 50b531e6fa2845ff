"""Feedback that carries no learner markup: Sandbox Lab's step in ``nbgrader generate_feedback``.

Threat: ``nbgrader autograde`` re-executes every learner cell, so whatever a
learner's code displays (``display(HTML("<script>…</script>"))``, an
``<img onerror=…>``, a crafted ``image/png`` string that closes the ``src``
attribute) is stored in the autograded notebook, and ``generate_feedback``
writes it verbatim into the HTML the instructor opens (and releases to
classmates' browsers as feedback). ``SanitizeFeedback`` runs in
``GenerateFeedback`` after ``GetGrades`` and before the exporter renders
anything; on **every** cell (the grader's own rubric outputs are plain text,
so nothing of ours is lost), it keeps:

- ``stream`` and ``error`` outputs as they are: the template escapes them
  (ANSI → HTML with every ``<`` escaped);
- of a rich output, ``text/plain`` (escaped by the template), ``text/html``
  and ``text/markdown`` run through ``nh3`` (allow-list: no ``<script>``, no
  ``on*=`` attribute, no ``javascript:`` URL, no ``<style>``), and
  ``image/png`` / ``image/jpeg`` only when the value is strict base64 (the
  template pastes it into an attribute unescaped);
- nothing else: ``application/javascript``, ``image/svg+xml`` (script-capable,
  and nh3 does not sanitise SVG), ``text/latex`` (pasted raw for MathJax),
  widget views and unknown types are replaced by a one-line note;
- markdown cells (and ``text/markdown`` outputs) rendered to HTML first, then
  cleaned by ``nh3`` (markdown passes raw HTML through, and a
  ``[x](javascript:…)`` link is HTML only once rendered), their
  ``attachments`` dropped; the notebook's ``widgets`` metadata (a
  JSON blob the template embeds in a ``<script>`` element) is removed.

Why nh3 and not bleach: bleach announced its deprecation in January 2023 and
points to nh3; nh3 binds ammonia (Rust, html5ever's spec-conformant parser,
an allow-list by default) and is maintained. nbconvert's own
``HTMLExporter.sanitize_html`` is not used: it covers markdown and HTML
outputs only (not the image attributes, not the widget state) and depends on
bleach.

Imports nothing of the package; only nbgrader's generate_feedback runs it
(``nbgrader_config.py``).
"""

from __future__ import annotations

import re
from typing import Any

from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from traitlets import Bool

__all__ = ["SanitizeFeedback", "clean_html", "sanitize_notebook"]

_BASE64_IMAGES = ("image/png", "image/jpeg")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")
REMOVED = "[output of type {kinds} removed from feedback: it could carry script]"


def clean_html(html: str) -> str:
    """The learner's HTML with every script-capable construct removed (nh3's allow-list; ``<script>``
    and ``<style>`` lose their content too)."""
    import nh3  # the lab extra (make lab and make venv install it)

    return str(nh3.clean(html))


def _markdown_as_html(source: str) -> str:
    """Markdown rendered to HTML and cleaned, as one HTML block the template's markdown pass keeps verbatim.

    Cleaning the markdown source would not do: ``[x](javascript:…)`` is no HTML until rendered. The result is
    wrapped in a ``<div>`` with no blank line inside (a CommonMark HTML block ends at a blank line), so text the
    learner escaped (``\\[x\\](javascript:…)``) is not turned into a link by the second pass.
    """
    from nbconvert.filters.markdown import markdown2html_mistune

    html = clean_html(markdown2html_mistune(source))
    lines = [line for line in html.splitlines() if line.strip()]
    return "<div>\n" + "\n".join(lines) + "\n</div>"


def _rich(output: NotebookNode) -> None:
    data: dict[str, Any] = dict(output.get("data", {}))
    kept: dict[str, Any] = {}
    dropped = []
    for kind, value in data.items():
        text = "".join(value) if isinstance(value, list) else value
        if kind == "text/plain" and isinstance(text, str):
            kept[kind] = text
        elif kind == "text/html" and isinstance(text, str):
            kept[kind] = clean_html(text)
        elif kind == "text/markdown" and isinstance(text, str):
            kept["text/html"] = _markdown_as_html(text)
        elif kind in _BASE64_IMAGES and isinstance(text, str) and _BASE64.match(text):
            kept[kind] = text
        else:
            dropped.append(kind)
    if dropped and "text/plain" not in kept:
        kept["text/plain"] = REMOVED.format(kinds=", ".join(sorted(dropped)))
    output["data"] = kept
    output["metadata"] = {}  # per-type metadata (image sizes, "isolated") is pasted into attributes too


def sanitize_notebook(nb: NotebookNode) -> NotebookNode:
    """The notebook with every learner-produced construct that could run script in the feedback neutralised."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _markdown_as_html(cell.source)
            cell.pop("attachments", None)
        elif cell.cell_type == "code":
            for output in cell.get("outputs", []):
                if output.get("output_type") in ("display_data", "execute_result"):
                    _rich(output)
        # raw cells are not rendered by the feedback template's HTML path unless their format says html
        elif cell.cell_type == "raw":
            cell.source = clean_html(cell.source)
    return nb


class SanitizeFeedback(Preprocessor):
    """nbgrader ``GenerateFeedback`` step: neutralise learner markup before the HTML is written."""

    # nbconvert runs a preprocessor only when enabled, and its default is off: on, or feedback ships unclean
    enabled = Bool(True).tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        return sanitize_notebook(nb), resources
