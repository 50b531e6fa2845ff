"""SanitizeFeedback: learner markup never reaches nbgrader's feedback HTML (unit level; the nbgrader run is in
tests/notebooks/test_nbgrader.py)."""

from __future__ import annotations

import nbformat
from bs4 import BeautifulSoup
from nbconvert import HTMLExporter

from grader.grading.feedback import REMOVED, SanitizeFeedback, clean_html, sanitize_notebook


def _notebook() -> nbformat.NotebookNode:
    code = nbformat.v4.new_code_cell("x")
    code.outputs = [
        nbformat.v4.new_output("display_data", data={
            "text/html": '<script>PWNED_1()</script><img src=x onerror="PWNED_2()"><b>bold</b>',
            "text/plain": "<IPython.core.display.HTML object>"}),
        nbformat.v4.new_output("display_data", data={"image/png": 'AAAA" onerror="PWNED_3()'}),
        nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo="},
                               metadata={"image/png": {"width": '1" onerror="PWNED_12()'}}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "PWNED_4()"}),
        nbformat.v4.new_output("display_data", data={"image/svg+xml": "<svg onload='PWNED_5()'/>"}),
        nbformat.v4.new_output("execute_result", data={"text/markdown": "[x](javascript:PWNED_6())"}, execution_count=1),
        nbformat.v4.new_output("stream", name="stdout", text="<script>PWNED_7()</script>"),
    ]
    md = nbformat.v4.new_markdown_cell('answer <img src=x onerror="PWNED_8()"> & more\n\n'
                                       '[a](javascript:PWNED_10())\n\n\\[b\\](javascript:PWNED_11())\n\n**strong**')
    nb = nbformat.v4.new_notebook(cells=[code, md])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"x": "</script><script>PWNED_9()"}}}
    return nb


def test_clean_html_removes_script_and_handlers() -> None:
    out = clean_html('<p onclick="a()">hi<script>b()</script></p><a href="javascript:c()">l</a>')
    assert "script" not in out and "onclick" not in out and "javascript" not in out
    assert "hi" in out


def test_every_marker_is_gone_from_the_rendered_html() -> None:
    nb = sanitize_notebook(_notebook())
    html, _ = HTMLExporter().from_notebook_node(nb)
    for i in (*range(1, 11), 12):
        if i == 7:
            continue  # the stream is escaped by the template: present as text, never as markup
        assert f"PWNED_{i}(" not in html, i
    assert "<script>PWNED_7" not in html and "&lt;script&gt;PWNED_7" in html
    soup = BeautifulSoup(html, "html.parser")
    assert [a for tag in soup.find_all(True) for a, v in tag.attrs.items()
            if a.startswith("on") or "javascript:" in str(v).lower()] == []
    assert "[b](javascript:PWNED_11())" in soup.get_text(), "escaped by the learner: text, never a link"
    assert "<b>bold</b>" in html and "<strong>strong</strong>" in html and "iVBORw0KGgo=" in html
    assert REMOVED.split("{")[0] in html


def test_without_the_step_the_markup_would_reach_the_html() -> None:
    """The attack is real: nbconvert alone pastes it through (so the test above means something)."""
    html, _ = HTMLExporter().from_notebook_node(_notebook())
    assert "<script>PWNED_1()</script>" in html and 'onerror="PWNED_3()' in html


def test_preprocessor_runs_when_called_as_nbconvert_calls_it() -> None:
    """nbconvert calls a preprocessor (``__call__``), which does nothing unless it is enabled."""
    nb, res = SanitizeFeedback()(_notebook(), {"k": 1})
    assert res == {"k": 1} and "widgets" not in nb.metadata
