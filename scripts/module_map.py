#!/usr/bin/env python3
"""Render docs/modules.md, the map of grader/'s modules, from the layer contract (``LAYERS`` in tests/unit/test_layers.py).

The contract is the one authority on where a module sits; this map is its
human-readable face, never retyped: one section per package (what it owns,
what it may import, what it does import), one row per module (its layer, its
line count and the first sentence of its docstring), then the layers, lowest
first, with the reason the contract gives for each.

Run ``make modules`` after adding, moving, splitting or re-documenting a module.
``--check`` writes nothing and exits 1 if docs/modules.md is out of date;
tests/unit/test_module_map.py runs the same comparison in ``make test``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "tests" / "unit" / "test_layers.py"
OUT = ROOT / "docs" / "modules.md"
COMMAND = "make modules"

# The package cut: what each package may import (what it owns is its __init__'s docstring). Sections appear
# in this order; a package not named here still gets a section, after these, saying it has no rule yet.
MAY_IMPORT: dict[str, str] = {
    "core": "the wire records shared with the containers (`services.wire`, `services.common`); "
            "no backend, feature or view",
    "core/probes": "`core` below it and the wire records; a channel family imports the record, never another family",
    "realtools": "`core`, the services' shared plumbing",
    "backends": "`core`, `realtools` (srt's notes), the services' shared records",
    "backends/docker": "`backends`' shared modules (base, runs, runlogs, enginedisk), `core`, the services' "
                       "shared records; the only package that imports the docker SDK",
    "services": "the standard library, dnslib and h11 (Debian packages in the image), and in the image the "
                "files beside them (`common`, `http1`, `nameserver`, `tls`, `wire`, `core/domains.py`); "
                "nothing else of the package",
    "lessons": "`core`, `ctf`, `grading` (the grades and report lines the board shows), a backend passed in, "
               "the services' shared plumbing",
    "ctf": "`core`, a backend passed in (`backends.base`)",
    "grading": "`core`, `realtools`, `ctf`, the question bank (`lessons.quiz`), a backend passed in",
    "cli": "anything below it; nothing imports it but `grader/__main__.py`",
    "": "every layer (the public API is re-exported here)",
}
TITLE = {"": "grader (the package's front door)"}
# What a package owns where it has no __init__ to say so (services/ are flat scripts in the image).
OWNS = {"services": "What runs inside containers: the probe runner, the egress proxy, the simulated internet, "
                    "and the records and plumbing they share with the grader."}


def load_contract() -> ModuleType:
    """tests/unit/test_layers.py as a module: LAYERS, SERVICES and its import reader."""
    spec = importlib.util.spec_from_file_location("_layer_contract", CONTRACT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def layer_notes(count: int) -> list[str]:
    """The comment the contract writes above (or beside) each layer, in LAYERS' order."""
    source = CONTRACT.read_text(encoding="utf-8")
    lines = source.splitlines()
    values = []  # what LAYERS is assigned: a tuple of layers, or tuple(... for layer in (<the layers>))
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == "LAYERS" and n.value:
            values.append(n.value)
        elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in n.targets):
            values.append(n.value)
    tuples = [t for v in values for t in ast.walk(v) if isinstance(t, ast.Tuple) and len(t.elts) == count]
    if not tuples:
        raise SystemExit(f"{CONTRACT}: cannot find the {count} layers of LAYERS")
    node = tuples[0]
    notes = []
    for elt in node.elts:
        above, i = [], elt.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("#").strip())
            i -= 1
        end = lines[(elt.end_lineno or elt.lineno) - 1]
        beside = end.split("#", 1)[1].strip() if "#" in end.split("}")[-1] else ""
        notes.append(" ".join([*above, beside]).strip())
    return notes


def summary(path: Path) -> str:
    """The first sentence of a module's docstring, on one line (a table cell)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    match = re.search(r"(?<!\be\.g)(?<!\bi\.e)[.!?](\s|$)", paragraph)
    sentence = paragraph[: match.start() + 1] if match else paragraph
    return sentence.replace("|", "\\|") or "(no docstring)"


def package_of(name: str) -> str:
    """The package a dotted module name belongs to, as a folder under grader/ ("" for grader/ itself)."""
    parts = name.split(".") if name else []
    while parts and not (ROOT / "grader" / "/".join(parts)).is_dir():
        parts.pop()  # a module, not a package: its package is the folder it lies in
    return "/".join(parts)


def render() -> str:
    contract = load_contract()
    package_dir: Path = contract.PACKAGE
    layers: tuple[frozenset[str], ...] = contract.LAYERS
    layer_of = {m: i for i, layer in enumerate(layers) for m in layer}
    in_image = set(contract.SERVICES) - layer_of.keys()
    notes = layer_notes(len(layers))

    modules: dict[str, list[tuple[str, Path]]] = defaultdict(list)
    imports: dict[str, set[str]] = defaultdict(set)
    total = 0
    for path in sorted(package_dir.rglob("*.py")):
        name = contract._name(path)
        modules[package_of(name)].append((name, path))
        total += len(path.read_text(encoding="utf-8").splitlines())
        imports[package_of(name)].update(package_of(d) for d in contract._imports(path))
    order = [p for p in MAY_IMPORT if p in modules] + sorted(p for p in modules if p not in MAY_IMPORT)

    def shown(pkg: str) -> str:
        return f"`{pkg}`" if pkg else "`grader`"

    count = sum(len(v) for v in modules.values())
    out = [
        "# Module map",
        "",
        "<!-- Generated by scripts/module_map.py from LAYERS in tests/unit/test_layers.py: do not edit by hand.",
        f"     Regenerate with `{COMMAND}`; tests/unit/test_module_map.py fails while this file is out of date. -->",
        "",
        f"`grader/`: {count} modules, {total} lines, {len(layers)} layers. The import-layer contract",
        "(`LAYERS` in `tests/unit/test_layers.py`) is the authority: a module imports only from",
        "strictly lower layers (a package's `__init__` may re-export its own modules), so data flows",
        "one way: policy → plan → run → outcomes → grade → report, judged against one world.",
        "",
        "## The package cut",
        "",
        "What each package owns is its `__init__`'s docstring; what it may import is the rule",
        "(in `scripts/module_map.py`); what it imports is measured from the code.",
        "",
        "| package | owns | may import | imports (measured) |",
        "|---|---|---|---|",
    ]
    for pkg in order:
        init = package_dir / pkg / "__init__.py"
        owns = summary(init) if init.is_file() else OWNS.get(pkg, "(no `__init__.py` says)")
        rule = MAY_IMPORT.get(pkg, "(no rule written yet: add one in scripts/module_map.py)")
        measured = ", ".join(shown(d) for d in sorted(imports[pkg] - {pkg})) or "nothing of the package"
        out.append(f"| {shown(pkg)} | {owns} | {rule} | {measured} |")
    for pkg in order:
        title = TITLE.get(pkg, f"grader/{pkg}/")
        rows = sorted(modules[pkg], key=lambda m: (layer_of.get(m[0], len(layers)), m[0]))
        lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for _, p in rows)
        out += ["", f"## {title}", "", f"{len(rows)} modules, {lines} lines.", "",
                "| layer | module | lines | what it owns |", "|---:|---|---:|---|"]
        for name, path in rows:
            layer = str(layer_of[name]) if name in layer_of else ("image" if name in in_image else "**none**")
            size = len(path.read_text(encoding="utf-8").splitlines())
            out.append(f"| {layer} | `{path.relative_to(package_dir.parent)}` | {size} | {summary(path)} |")
    out += ["", "## Layers, lowest first", "",
            "`image`: a service run inside a container as a flat script, outside the layers (standard library only).",
            "", "| layer | modules | why |", "|---:|---|---|"]
    for i, layer in enumerate(layers):
        names = ", ".join(f"`{m or 'grader'}`" for m in sorted(layer))
        out.append(f"| {i} | {names} | {notes[i]} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/modules.md is out of date; write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
