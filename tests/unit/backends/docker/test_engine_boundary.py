"""No SDK object outside the engine adapter: the modules around it hold ``DockerEngine`` and refs, typed.

An AST scan of the Docker backend's modules and of those that may hold an
engine (cleanup, the run service's worker, the warm engine): outside
``backends/docker/engine.py`` no function takes or returns ``Any``, no
attribute chain reaches into the SDK's client (``x.api.…``,
``x.containers.create``, ``x.images.get``…), and no call wraps the SDK in
``engine_errors`` (the adapter's methods map the errors themselves).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[4] / "grader"
ADAPTER = "backends/docker/engine.py"
SCANNED = sorted(
    [str(p.relative_to(PACKAGE)) for p in (PACKAGE / "backends" / "docker").glob("*.py")]
    + ["backends/cleanup.py", "hosted/worker.py", "cli/engine.py"]
)

# The SDK client's collections and the methods that reach the engine through them.
SDK_CALLS = {
    "containers": {"create", "get", "list", "run", "prune"},
    "networks": {"create", "get", "list", "prune"},
    "images": {"get", "build", "pull", "list", "load", "remove", "push", "prune"},
    "volumes": {"create", "get", "list", "prune"},
}


def _names_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return _names_any(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return False
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1] in ("dict", "Dict", "Mapping"):
        return _names_any(node.slice.elts[0]) if isinstance(node.slice, ast.Tuple) else False  # a JSON record's values
    return any(_names_any(n) for n in ast.iter_child_nodes(node) if isinstance(n, ast.expr)) or (
        isinstance(node, ast.Name) and node.id == "Any" or isinstance(node, ast.Attribute) and node.attr == "Any")


def violations(source: str, *, typed: bool = True) -> list[str]:
    """What in ``source`` holds or reaches an SDK object: one line per finding (``typed``: an ``Any`` counts too)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if typed and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []), *([a.kwarg] if a.kwarg else [])]
            for p in params:
                if _names_any(p.annotation):
                    found.append(f"{node.lineno}: {node.name}({p.arg}: Any)")
            if _names_any(node.returns):
                found.append(f"{node.lineno}: {node.name}() -> Any")
        elif typed and isinstance(node, ast.AnnAssign) and _names_any(node.annotation) and isinstance(node.target, ast.Attribute):
            found.append(f"{node.lineno}: attribute {ast.unparse(node.target)}: Any")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner = node.value.attr
            if inner == "api" or node.attr in SDK_CALLS.get(inner, ()):
                found.append(f"{node.lineno}: {ast.unparse(node)} reaches into the SDK's client")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "engine_errors":
            found.append(f"{node.lineno}: engine_errors() outside the adapter")
    return found


@pytest.mark.parametrize("module", [m for m in SCANNED if m != ADAPTER])
def test_no_sdk_object_outside_the_adapter(module: str) -> None:
    # the engine's boundary is typed in the backends: no Any there, but a JSON record's values (dict[str, Any]) may be
    found = violations((PACKAGE / module).read_text(encoding="utf-8"), typed=module.startswith("backends/"))
    assert not found, f"{module}:\n" + "\n".join(found)


PLANTED = '''
from typing import Any, Optional

def run(client: Any, name: str) -> Optional[Any]:
    c = client.containers.create("img", ["true"], name=name)
    with engine_errors():
        c.start()
    return client.api.inspect_container(c.id)

class Holder:
    def __init__(self) -> None:
        self.container: "Optional[Any]" = None
'''

CLEAN = '''
from grader.backends.docker.engine import ContainerRef, DockerEngine

def run(engine: DockerEngine, name: str, images: "Images") -> ContainerRef:
    c = engine.create_container(images.sandbox, ["true"], name=name)
    engine.start(c)
    return engine.inspect(c)
'''


def test_the_scan_finds_a_planted_violation_and_passes_clean_code() -> None:
    found = violations(PLANTED)
    assert any("run(client: Any)" in f for f in found)
    assert any("run() -> Any" in f for f in found)
    assert any("client.containers.create" in f for f in found)
    assert any("client.api.inspect_container" in f for f in found)
    assert any("engine_errors()" in f for f in found)
    assert any("self.container: Any" in f for f in found)
    assert violations(CLEAN) == []
