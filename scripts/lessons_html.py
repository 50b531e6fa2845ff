#!/usr/bin/env python3
"""Execute each lesson notebook and write it as HTML, so a reviewer can read the lessons without a kernel.

Usage (from the repository root; ``make lessons-html`` runs it)::

    python scripts/lessons_html.py [--backend static|docker|auto] [--out build/lessons-html] [NOTEBOOK ...]

The static backend is the default: the export needs no Docker and is the same
on every machine. Widgets are exported through the ``text/html`` rendering
each Sandbox Lab widget carries (the live widget views need a kernel), so the
boards, editors and quizzes show as static HTML; a question not yet answered
shows without its model answer. The learner's progress file is never touched.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _static_widgets(nb: Any) -> None:
    """Drop live widget views where a text/html rendering exists, so the export shows the HTML."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]
    nb.metadata.pop("widgets", None)


def export(path: Path, out_dir: Path) -> Path:
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    _static_widgets(nb)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    target = out_dir / f"{path.parent.name}.html"
    target.write_text(body, encoding="utf-8")
    return target


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="static", choices=["static", "docker", "auto"])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "lessons-html")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "lessons").glob("0*/*.ipynb"))
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["SANDBOX_LAB_BACKEND"] = args.backend  # the kernels inherit it
    links = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SANDBOX_LAB_PROGRESS"] = str(Path(tmp) / "progress.json")
        for nb_path in notebooks:
            start = time.monotonic()
            target = export(nb_path.resolve(), args.out)
            print(f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}  ({time.monotonic() - start:.1f} s)")
            links.append(f'<li><a href="{target.name}">{nb_path.parent.name}</a></li>')
    index = args.out / "index.html"
    index.write_text(
        "<!doctype html><meta charset='utf-8'><title>Sandbox Lab lessons</title>"
        f"<h1>Sandbox Lab lessons</h1><p>Executed with the {args.backend} backend.</p><ul>{''.join(links)}</ul>\n",
        encoding="utf-8",
    )
    print(f"{index}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
