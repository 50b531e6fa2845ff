"""The architecture, checked: import-linter's contracts (``[tool.importlinter]`` in pyproject.toml), and a test for
every module.

The packages are the layers (STYLE.md): data flows one way, policy → plan → run → outcomes → grade → report, and a
package imports only the packages below it. import-linter checks that, plus "only the engine adapter imports the
Docker SDK", "nothing below the notebook pulls in a widget", "the protocol is the standard library" and "no cycle
between sibling modules". The services run inside containers on the standard library alone: they import nothing of
the package but ``protocol``, whose files lie beside them in the image.

Every module has a test module named after it, or a line in tests/README.md that names the test covering it (or
covering every module of its directory).
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "grader"

def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@functools.lru_cache(maxsize=None)
def _known() -> frozenset[str]:
    return frozenset(_name(p) for p in PACKAGE.rglob("*.py"))


@functools.lru_cache(maxsize=None)
def _nodes(source: str) -> tuple[ast.AST, ...]:  # several tests read every module: each text is parsed once
    return tuple(ast.walk(ast.parse(source)))


def _imports(path: Path) -> set[str]:
    """The package modules ``path`` imports (relative or absolute), as dotted names under grader."""
    name = _name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if name == "":
        package = []
    found: set[str] = set()
    for node in _nodes(path.read_text(encoding="utf-8")):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)]
            if node.module:
                target = ".".join(base + node.module.split("."))
                found.add(target)
            else:
                found.update(".".join(base + [a.name]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "grader":
            base_name = node.module.partition(".")[2]
            here = PACKAGE / base_name.replace(".", "/")
            subs = [f"{base_name}.{a.name}".lstrip(".") for a in node.names
                    if (here / f"{a.name}.py").is_file() or (here / a.name / "__init__.py").is_file()]
            found.update(subs or [base_name])  # "from grader.services import wire" names the module wire
        elif isinstance(node, ast.Import):
            found.update(a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == "grader")
    known = _known()
    out = set()
    for f in found:
        while f and f not in known:  # "from .backends import base" names a module; "from .x import y" names x
            f = f.rpartition(".")[0]
        if f != name:
            out.add(f)
    return out


SERVICES = tuple(f"services.{p.stem}" for p in sorted((PACKAGE / "services").glob("*.py")) if p.stem != "__init__")
PROTOCOL = {p.stem for p in (PACKAGE / "protocol").glob("*.py")} - {"__init__"}
# what the services image carries beside the services: flat scripts, protocol/'s files, the standard library and
# the Debian packages the image installs (python3-dnslib, python3-h11)
IN_IMAGE = PROTOCOL | {s.rpartition(".")[2] for s in SERVICES}
IN_IMAGE_LIBRARIES = {"dnslib", "h11"}
_IN_IMAGE_TOPS = set(sys.stdlib_module_names) | IN_IMAGE | IN_IMAGE_LIBRARIES | {"grader", "__future__"}


def _lint(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_the_contracts_hold() -> None:
    """Every contract in pyproject.toml is kept, with no exception listed (no ``ignore_imports``)."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    assert {c["id"] for c in contracts} >= {"layers", "docker-adapter", "no-widgets-below-the-notebook", "no-cycles"}
    assert not [c["id"] for c in contracts if c.get("ignore_imports") or c.get("exhaustive_ignores")]
    done = _lint()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(contracts)} kept, 0 broken" in done.stdout


def test_every_package_is_a_layer() -> None:
    """The layers contract is exhaustive: a new package must take its place in it, or the lint fails."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "layers")
    assert layers["exhaustive"] is True
    listed = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    children = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} | {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert children == listed


TOY = {
    "toy/__init__.py": "",
    "toy/low/__init__.py": "",
    "toy/low/a.py": "import toy.low.b\n",
    "toy/low/b.py": "import toy.low.a\nimport toy.high.c\n",  # a cycle, and a low module importing a high one
    "toy/high/__init__.py": "",
    "toy/high/c.py": "import docker\nimport ipywidgets\n",
}
TOY_CONFIG = """
[tool.importlinter]
root_package = "toy"
include_external_packages = true
[[tool.importlinter.contracts]]
id = "layers"
name = "layers"
type = "layers"
containers = ["toy"]
layers = ["high", "low"]
[[tool.importlinter.contracts]]
id = "docker-adapter"
name = "docker"
type = "protected"
protected_modules = ["docker"]
allowed_importers = ["toy.low.a"]
[[tool.importlinter.contracts]]
id = "widgets"
name = "widgets"
type = "forbidden"
source_modules = ["toy.low"]
forbidden_modules = ["ipywidgets"]
allow_indirect_imports = false
[[tool.importlinter.contracts]]
id = "no-cycles"
name = "no cycles"
type = "acyclic_siblings"
ancestors = ["toy"]
"""


def test_the_contract_types_can_fail(tmp_path: Path) -> None:
    """Each kind of contract the project relies on breaks on a package that breaks it (the lint is not vacuous)."""
    for rel, text in TOY.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(TOY_CONFIG, encoding="utf-8")
    done = _lint(cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "4 broken" in done.stdout, done.stdout + done.stderr
    assert "toy.low.b -> toy.high.c" in done.stdout


def test_a_reversed_layer_is_caught_in_the_real_package(tmp_path: Path) -> None:
    """The real graph: ``core`` placed above ``grading`` breaks, since grading imports core."""
    config = tmp_path / "reversed.toml"
    config.write_text("""
[tool.importlinter]
root_package = "grader"
[[tool.importlinter.contracts]]
id = "reversed"
name = "reversed"
type = "layers"
containers = ["grader"]
layers = ["core", "grading"]
""", encoding="utf-8")
    done = _lint("--config", str(config))
    assert done.returncode == 1 and "grader.grading" in done.stdout, done.stdout + done.stderr


def test_the_static_path_needs_no_service_library() -> None:
    """``protocol`` is imported by the static install (pydantic only): it imports no library."""
    for name in PROTOCOL:
        tree = ast.parse((PACKAGE / "protocol" / f"{name}.py").read_text(encoding="utf-8"))
        tops = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        tops |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not tops & IN_IMAGE_LIBRARIES, f"protocol/{name}.py imports {tops & IN_IMAGE_LIBRARIES}"


@pytest.mark.parametrize("service", SERVICES)
def test_services_use_the_standard_library_and_the_files_beside_them_only(service: str) -> None:
    """In the image the services are flat scripts; on the host they fall back to the same files in the package."""
    tree = ast.parse((PACKAGE / (service.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{service} uses a relative import; the container has no package"
            if (node.module or "").split(".")[0] == "grader":
                assert node.module in ("grader.protocol", "grader.services"), f"{service} imports {node.module}"
                assert {a.name for a in node.names} <= IN_IMAGE, f"{service} imports {node.module}: not in the image"
            top = (node.module or "").split(".")[0]
            assert top in _IN_IMAGE_TOPS, f"{service} imports {node.module}: neither the standard library nor in the image"
        elif isinstance(node, ast.Import):
            for a in node.names:
                assert a.name.split(".")[0] != "grader", f"{service} imports {a.name}"
                assert a.name.split(".")[0] in _IN_IMAGE_TOPS, f"{service} imports {a.name}: not in the image"


def test_the_images_carry_the_protocol_whole() -> None:
    """Both images hold every file of protocol/ and the Dockerfiles copy their whole context: one list."""
    from grader.backends.docker.images import image_specs

    for spec in image_specs().values():
        assert {name for name, _ in spec.files} >= {f"{m}.py" for m in PROTOCOL}
        assert "COPY *.py /opt/sandbox-lab/" in (spec.dockerfile_dir / "Dockerfile").read_text(encoding="utf-8")


def test_every_module_has_a_test() -> None:
    readme = (REPO / "tests" / "README.md").read_text(encoding="utf-8")
    tests = {p.stem for p in (REPO / "tests").rglob("test_*.py")}
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(REPO))
        stem = path.parent.name if path.name == "__init__.py" else path.stem
        if f"test_{stem}" in tests:
            continue
        body = ast.parse(path.read_text(encoding="utf-8")).body
        if path.name == "__init__.py" and len(body) == 1 and isinstance(body[0], ast.Expr):
            continue  # a package's docstring: nothing to test
        folder = f"`{path.parent.relative_to(REPO)}/`"  # a row may cover a package's every module (core/probes/)
        line = next((ln for ln in readme.splitlines() if f"`{rel}`" in ln or ln.startswith(f"| {folder} |")), "")
        named = [t for t in tests if t in line]
        if not named:
            missing.append(rel)
    assert not missing, f"no test module named after these, and no line in tests/README.md naming one: {missing}"


def test_the_unit_tests_mirror_the_package() -> None:
    """tests/unit/ is shaped like grader/: a test named after a module sits in that module's package folder, and
    every folder but ``project/`` (the repository's own checks) is a package of grader/."""
    unit = REPO / "tests" / "unit"
    homes: dict[str, set[Path]] = {}
    for path in PACKAGE.rglob("*.py"):
        stem = path.parent.name if path.name == "__init__.py" else path.stem
        home = path.parent.relative_to(PACKAGE)  # a package's own test (test_backends.py) sits in its folder
        homes.setdefault(stem, set()).add(home)
    misplaced = []
    for test in sorted(unit.rglob("test_*.py")):
        folder = test.parent.relative_to(unit)
        if folder.parts[:1] == ("project",):
            continue
        if not (PACKAGE / folder).is_dir():
            misplaced.append(f"{test.relative_to(REPO)}: grader/{folder}/ is no package")
        elif test.stem[5:] in homes and folder not in homes[test.stem[5:]]:
            misplaced.append(f"{test.relative_to(REPO)}: its module lives in grader/{sorted(homes[test.stem[5:]])[0]}/")
    assert not misplaced, misplaced
