"""The architecture, checked: the import layers of STYLE.md, and a test for every module.

Data flows one way: policy → plan → run → outcomes → grade → report, judged
against one world. ``LAYERS`` writes that order down, lowest first; a module
may import only from strictly lower layers (a package's ``__init__`` re-exports
its own layer). A new module must be placed here, or this test fails. The
services run inside containers on the standard library alone: they import
nothing of the package but their shared ``common``.

Every module has a test module named after it, or a line in tests/README.md
that names the test covering it (or covering every module of its directory).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "grader"

# the probes' channel families and the scope scan: every module of grader/core/probes/ but these three
PROBE_CHANNELS = frozenset(f"core.probes.{p.stem}" for p in (PACKAGE / "core" / "probes").glob("*.py")) - {
    "core.probes.__init__", "core.probes.record", "core.probes.registry"}

LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer) for layer in (
    # the wire records every boundary parses (stdlib only, shared with the containers): below everything
    {"services.wire"},
    # the packages' own __init__: a docstring, nothing imported
    {"core", "realtools", "lessons", "ctf", "grading", "cli", "backends.docker", "hosted"},
    # vocabulary: imports nothing of the package (services.common: stdlib only, shared with the containers)
    {"core.errors", "core.capped", "core.paths", "core.domains", "core.records", "core.timings", "core.version",
     "services.common",
     "lessons.first_answer"},
    # srt's mandatory write protections: its list, and what it finds from where it starts (imports paths only);
    # what JSON and UTF-8 allow in a string read from outside (imports errors only)
    {"core.mandatory", "core.text"},
    # a JSON file a person keeps, read within a bound
    {"core.jsonfile"},
    # the course's route (its stops and measured times), read by the progress record
    {"lessons.route", "lessons.progress_sync"},
    # the inputs: the learner's policy, the simulated world, and words shared by every renderer
    {"core.policy", "core.world", "core.wording", "lessons.progress"},
    # the semantics of the policy language
    {"core.access", "core.next_session"},
    # what a policy grants, and what a real run leaves behind
    {"core.channels", "core.scope", "core.evidence", "realtools.srt_notes", "realtools.hatches", "realtools.machine"},
    # one record per probe: the record, and the wording several channel families share
    {"core.probes.record"},
    # the channel families and the scope scan's orders: every other module of core/probes/ (a probe on a
    # new channel is a module there, placed here without a line of its own); no family imports another
    PROBE_CHANNELS,
    # the probe catalogue: every family's records in their order
    {"core.probes.registry"},
    # the probes package: re-exports the catalogue's public API; what a sandbox grants, found once per run
    {"core.probes", "core.findings"},
    # a run's result: its probe outcomes and its findings
    {"core.outcomes"},
    # policy → predictions, plan, needs; the question bank
    {"core.analyzer", "core.plan", "core.needs", "lessons.quiz"},
    # run: judging real runs; export to the real tools
    {"core.verdicts", "lessons.prediction", "realtools.export", "core.execution", "lessons.goals", "lessons.needed_jobs"},
    # the run service's wire form: a result and an execution as JSON, and the requests, read strictly both ways
    {"core.transport"},
    # bring your own settings: a real settings file read back as a policy
    {"realtools.importer"},
    # a scripted agent run as a job; its transcript predicted from the policy (the backend is passed in); what an
    # attack's records show it did; the capture-the-flag levels as data
    {"lessons.agent", "ctf.diagnosis", "ctf.levels"},
    # the one importer of the docker SDK, where the engine's errors become ours
    {"backends.docker.engine"},
    # a run's surroundings: the runs root and its owner records, the host's listener, removing what runs left
    {"backends.owners", "backends.listeners", "backends.quota"},
    {"backends.cleanup"},
    {"backends.base", "backends.docker.images", "backends.runs", "backends.docker.runtimes"},
    # a service's working directory (docker-free: the srt backend's too); its kind on the engine's own disk
    {"backends.files"},
    {"backends.docker.volumes"},
    # where a run's files live for the engine (the grader's disk, or the engine's through its API); whether a
    # recorder is up and answering (its ready file, its heartbeat, a poke)
    {"backends.docker.enginedisk", "backends.docker.liveness"},
    {"backends.static", "backends.docker.simnet", "backends.docker.lease", "backends.runlogs"},
    # what one run made (removed together), then the one interface to the shared internet (in-process or the hub's)
    {"backends.docker.resources"},
    {"backends.docker.sharing"},
    {"backends.docker.hub", "backends.docker.replay"},
    {"backends.docker.run", "backends.srt", "backends.remote"},
    # a run held ready up to its probes (issue 40)
    {"backends.docker.prepared"},
    {"backends.docker.backend"},
    {"backends"},
    # the run service's runs and executions, on the server: a request read strictly, the plan rebuilt, a local backend
    {"hosted.remote_kinds"},
    # grade; the gaps a policy leaves, run as demos; the capture-the-flag ladder, and the solutions a learner asked for
    {"grading.tasks", "ctf.ladder", "ctf.reveals", "lessons.gaps", "lessons.hole_hunt", "lessons.session_runs"},
    {"grading.grade", "grading.intake", "lessons.prestart"},
    {"grading.batch", "grading.notebook"},
    # a submission as received, checked against the released assignment (before any learner code runs)
    {"grading.submission"},
    # graded letters and their first answers, scored outside the learner's kernel
    {"grading.answers"},
    {"grading.autograde"},
    # report
    {"grading.report", "grading.feedback", "grading.lms", "grading.class_report"},
    # an nbgrader course read as the class report's gradebook
    {"grading.nbgrader_book"},
    # the learner's copy: nbgrader's ClearSolutions, with an instructor's key left out without a stub
    {"grading.release"},
    # views, each feature its own (HTML strings), sharing only the palette
    {"lessons.palette"},
    {"lessons.quiz_views", "lessons.progress_views", "lessons.agent_views", "lessons.goal_views", "ctf.views"},
    {"lessons.board", "lessons.summary"},
    # widgets (ipywidgets), each feature its own; ``widgets`` re-exports them for the lessons
    {"lessons.widget_base"},
    {"lessons.quiz_widgets", "lessons.agent_stage", "ctf.widgets", "lessons.export_view"},
    {"lessons.widgets", "ctf.magic"},
    # the edge: argv and exit codes
    {"cli.core", "cli.client"},
    # the warm engine: runs cli.main's commands, given main (never imports it); the cleanup command stops it
    {"cli.ahead"},
    {"cli.engine"},
    {"cli.commands"},
    # the run service (the server side of docs/service-api.md): its errors, settings and tokens; the body limit;
    # the kinds it runs (the CLI's results); metrics in Redis; the jobs on RQ; the API, the worker, their commands
    {"hosted"},
    {"hosted.problems", "hosted.settings", "hosted.tokens"},
    {"hosted.kept"},
    {"hosted.limits", "hosted.kinds", "hosted.metrics", "hosted.progress_store"},
    {"hosted.jobs"},
    {"hosted.app", "hosted.worker"},
    {"hosted.commands"},
    {"cli.main"},
    {"__main__", ""},  # "" is grader/__init__.py: the public API re-exports every layer
))
SERVICES = ("services.probe_runner", "services.proxy", "services.internet", "services.nameserver", "services.http1",
            "services.tls", "services.wire")


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The package modules ``path`` imports (relative or absolute), as dotted names under grader."""
    name = _name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if name == "":
        package = []
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
    known = {_name(p) for p in PACKAGE.rglob("*.py")}
    out = set()
    for f in found:
        while f and f not in known:  # "from .backends import base" names a module; "from .x import y" names x
            f = f.rpartition(".")[0]
        if f != name:
            out.add(f)
    return out


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "services" not in p.parts or p.name == "common.py")
LAYER_OF = {m: i for i, layer in enumerate(LAYERS) for m in layer}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_module_imports_only_from_lower_layers(path: Path) -> None:
    name = _name(path)
    assert name in LAYER_OF, f"{name or 'grader/__init__'} is in no layer: place it in LAYERS (tests/unit/test_layers.py)"
    mine = LAYER_OF[name]
    upward = sorted(d for d in _imports(path) if LAYER_OF.get(d, -1) >= mine and not (path.name == "__init__.py" and d.startswith(name)))
    assert not upward, f"{name} (layer {mine}) imports {upward} from its own layer or above"


# what the services image carries beside the services: flat scripts, the standard library and the Debian
# packages the image installs (python3-dnslib, python3-h11)
IN_IMAGE = {"common", "domains", "http1", "nameserver", "tls", "wire"}
IN_IMAGE_LIBRARIES = {"dnslib", "h11"}
_IN_IMAGE_TOPS = set(sys.stdlib_module_names) | IN_IMAGE | IN_IMAGE_LIBRARIES | {"grader", "__future__"}


def test_the_static_path_needs_no_service_library() -> None:
    """``common`` and ``wire`` are imported by the static install (pydantic only): they import no library."""
    for name in ("common", "wire"):
        tree = ast.parse((PACKAGE / "services" / f"{name}.py").read_text(encoding="utf-8"))
        tops = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        tops |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not tops & IN_IMAGE_LIBRARIES, f"services/{name}.py imports {tops & IN_IMAGE_LIBRARIES}"


@pytest.mark.parametrize("service", SERVICES)
def test_services_use_the_standard_library_and_the_files_beside_them_only(service: str) -> None:
    """In the image the services are flat scripts; on the host they fall back to the same files in the package."""
    tree = ast.parse((PACKAGE / (service.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{service} uses a relative import; the container has no package"
            if (node.module or "").split(".")[0] == "grader":
                assert {a.name for a in node.names} <= IN_IMAGE, f"{service} imports {node.module}: not in the image"
            top = (node.module or "").split(".")[0]
            assert top in _IN_IMAGE_TOPS, f"{service} imports {node.module}: neither the standard library nor in the image"
        elif isinstance(node, ast.Import):
            for a in node.names:
                assert a.name.split(".")[0] != "grader", f"{service} imports {a.name}"
                assert a.name.split(".")[0] in _IN_IMAGE_TOPS, f"{service} imports {a.name}: not in the image"
    assert not _imports(PACKAGE / "core" / "domains.py"), "domains runs in the image: it must import nothing of the package"
    assert not _imports(PACKAGE / "services" / "wire.py"), "wire runs in the image: it must import nothing of the package"


def test_the_contract_can_fail(tmp_path: Path) -> None:
    """A low module that imports a high one is caught (the checker is not vacuous)."""
    assert "grading.grade" in _imports(PACKAGE / "grading" / "batch.py")
    assert LAYER_OF["core.errors"] < LAYER_OF["grading.grade"]


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
