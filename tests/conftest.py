"""Shared test machinery: the ``docker`` marker, ``--update-goldens`` (after otter-grader's test/conftest.py),
the environment's tools first on ``PATH``, and a run that leaves the host as it found it.

A test that needs Docker says so with ``@pytest.mark.docker`` (and usually the
``docker_client`` fixture). When no engine answers, such a test is skipped
with the reason locally, and fails when ``CI`` is set: in CI a missing engine
is a broken pipeline, not a reason to pass.

Every subprocess a test starts finds the tools of the Python running the
tests (``.venv/bin``: nbgrader's ``alembic``, ``jupyter``) before anything else
on the machine, however pytest was started. At the end of the session, the
run fails if a watched host path appeared during it (``hostcheck.py``). A run
that may run a Docker test starts a bystander on the engine before its first
test (``bystander.py``), and fails if it is gone or stopped after the last.
Under pytest-xdist (``make test``) these checks are the controller's: they
cover every worker's tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import bystander
import hostcheck

NO_ENGINE = "no Docker engine answers: run scripts/ensure-docker"

# jsonschema (under nbformat, so under every test module that reads a notebook) checks the "iri" and
# "iri-reference" formats with rfc3987-syntax when it is installed (the lab's jupyter-events asks for it), and that
# compiles 38 Lark grammars on import: 1.8 s in each test process, most of the fast set's collection. No schema the
# tests validate has those formats (tests/unit/project/test_conftest.py checks nbformat's); so it is not imported.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # an import of it raises ImportError

# A one-shot command that ran Docker starts the warm engine (grader/cli/engine.py), and the next is handed to it.
# The suite's commands run here, as each test sets them up; tests/integration/test_warm_engine.py turns it on.
os.environ["SANDBOX_LAB_ENGINE"] = "off"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite golden files (tests/fixtures/...) from the current output instead of comparing with them",
    )


@pytest.fixture(autouse=True)
def _own_progress_file(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test records progress in a file of its own, never the learner's ~/.sandbox-lab/progress.json
    (a passing task check records the task as done); a test that names its own file still can."""
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path_factory.mktemp("progress") / "progress.json"))
    # nor a run service the developer's shell names (progress syncs to it; a test that wants one sets its own)
    for name in ("SANDBOX_LAB_SERVICE_URL", "SANDBOX_LAB_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _release_world_quotas(request: pytest.FixtureRequest) -> Iterator[None]:
    """A run directory a test lays out in its tmp_path has its world on a tmpfs (backends/quota.py, as root): the
    test owns that directory, so its mount goes when the test ends (pytest cannot remove a mount point later)."""
    owned = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if owned is not None:
        from grader.backends.quota import release

        release(owned)


@pytest.fixture(scope="session")
def update_goldens(request: pytest.FixtureRequest) -> bool:
    """True when the run was started with ``--update-goldens``."""
    return bool(request.config.getoption("--update-goldens"))


GOLDENS = Path(__file__).parent / "fixtures" / "goldens"


@pytest.fixture(scope="session")
def golden(update_goldens: bool) -> Callable[[str, str], None]:
    """``golden(name, text)``: compare ``text`` with ``tests/fixtures/goldens/<name>`` (or rewrite it with --update-goldens)."""

    def check(name: str, text: str) -> None:
        path = GOLDENS / name
        if update_goldens:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        assert path.exists(), f"missing golden {path}: run pytest --update-goldens"
        assert text == path.read_text(encoding="utf-8"), f"{name} differs from its golden file; refresh with --update-goldens if intended"

    return check


def _in_ci() -> bool:
    return bool(os.environ.get("CI"))


def _engine_problem(config: pytest.Config) -> str:
    """"" when an engine answers, else why not; asked once per session."""
    cached = config.stash.get(_ENGINE_KEY, None)
    if cached is not None:
        return cached
    try:
        import docker

        client = docker.from_env()
        try:
            client.ping()
        finally:
            client.close()
        problem = ""
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine" here
        problem = f"{NO_ENGINE} ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
    config.stash[_ENGINE_KEY] = problem
    return problem


_ENGINE_KEY = pytest.StashKey[str]()


def _require_engine(config: pytest.Config) -> None:
    problem = _engine_problem(config)
    if problem:
        if _in_ci():
            pytest.fail(f"{problem}; CI is set, so this fails instead of skipping", pytrace=False)
        pytest.skip(problem)


TESTS = Path(__file__).resolve().parent
# a folder whose every test carries its marker (added here, whatever the module says): a run whose -m leaves that
# marker out (``make test-fast``) need not import the folder's modules at all
FOLDER_MARKS = {"notebooks": "notebook", "browser": "browser"}


def _folder_mark(path: Path) -> str:
    try:
        return FOLDER_MARKS.get(path.resolve().relative_to(TESTS).parts[0], "")
    except (ValueError, IndexError):
        return ""


def _excludes(markexpr: str, mark: str) -> bool:
    """Whether -m leaves out every test marked ``mark``: a plain conjunction with ``not mark`` among its terms
    (anything else, an ``or`` or parentheses, is not read: the folder is then collected and -m decides)."""
    if not markexpr or any(c in markexpr for c in "()") or " or " in f" {markexpr} ":
        return False
    return f"not {mark}" in (" ".join(term.split()) for term in markexpr.split(" and "))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    mark = _folder_mark(collection_path)
    return True if mark and _excludes(config.getoption("markexpr", "") or "", mark) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that asks for the engine (``docker_client``, directly or through another fixture) is a Docker test,
    marked or not: ``-m "not docker"`` (``make test-fast``) leaves it out, and the bystander check watches it.
    A test in ``tests/notebooks`` or ``tests/browser`` carries that folder's marker the same way."""
    for item in items:
        if "docker_client" in getattr(item, "fixturenames", ()) and item.get_closest_marker("docker") is None:
            item.add_marker(pytest.mark.docker)
        mark = _folder_mark(Path(str(item.path)))
        if mark and item.get_closest_marker(mark) is None:
            item.add_marker(getattr(pytest.mark, mark))


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Runs before fixtures are set up: a marked test fails or skips the same way
    # whether or not it asks for docker_client.
    if item.get_closest_marker("docker") is not None:
        _require_engine(item.config)


@pytest.fixture(scope="session")
def docker_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A client of the engine ``DOCKER_HOST`` names (or the default socket), after a ping."""
    _require_engine(request.config)
    import docker

    client = docker.from_env()
    client.ping()
    yield client
    client.close()


def _venv_bin_first() -> None:
    """Put the directory of the running Python first on PATH (and name its venv), as `make` does."""
    bindir = os.path.dirname(sys.executable)
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bindir]
    os.environ["PATH"] = os.pathsep.join([bindir, *rest])
    if sys.prefix != sys.base_prefix:
        os.environ["VIRTUAL_ENV"] = sys.prefix


_HOST_BEFORE = pytest.StashKey[frozenset[str]]()
_HOST_NEW = pytest.StashKey[list[str]]()


_SESSION_RUNS = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG[:] = [config]
    _venv_bin_first()
    _session_runs_root(config)


def _session_runs_root(config: pytest.Config) -> None:
    """This session's runs root, apart from the machine's (``SANDBOX_LAB_RUNS``, unless the caller set one).

    A kernel, a terminal's command and its warm engine adopt the machine's hub in the runs root: a lesson run by
    a test would otherwise adopt (or start) the hub of the user's own runs root, and leave its keeper running
    there after the session. Set by the controller before xdist starts its workers, which inherit it; made by
    the grader's own ``private_root`` (root's mode lets the sandbox's user pass through); its keepers stopped and
    the directory removed at the session's end (``_end_session_runs_root``)."""
    if not _controller(config) or os.environ.get("SANDBOX_LAB_RUNS"):
        return
    root = Path(tempfile.gettempdir()) / f"sl-test-runs-{os.getpid()}"
    os.environ["SANDBOX_LAB_RUNS"] = str(root)
    from grader.backends.owners import private_root

    private_root()
    config.stash[_SESSION_RUNS] = root


def _end_session_runs_root(config: pytest.Config) -> None:
    root = config.stash.get(_SESSION_RUNS, None)
    if root is None:
        return
    try:
        from grader.backends.docker.hub import stop_keepers

        stop_keepers()  # each removes its internet and proxies as it goes
    except Exception as exc:  # noqa: BLE001 - no engine, no docker package: nothing of a keeper to stop
        print(f"the session's keepers were not stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
    from grader.backends.quota import remove_dir

    left = sorted(root.iterdir()) if root.is_dir() else []
    if left:  # a run a test killed mid-way, its world quota still mounted: removed as the grader's sweep would
        print(f"the session's runs root held {[p.name for p in left]} at its end: removed", file=sys.stderr)
    for p in left:
        if p.is_dir():
            remove_dir(p)  # its world quota unmounted first
        else:
            p.unlink(missing_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    for beside in root.parent.glob(f"{root.name}.*"):  # the sweep's stamp (``cleanup.SWEEP_STAMP``) lives beside it
        with contextlib.suppress(OSError):
            beside.unlink()


def _controller(config: pytest.Config) -> bool:
    """The process that owns the run: the only one without pytest-xdist's ``workerinput`` (-n 0: the only one)."""
    return not hasattr(config, "workerinput")


def _distributed(config: pytest.Config) -> bool:
    """This controller hands the tests to pytest-xdist's workers (``make test``: -n TEST_WORKERS --dist loadfile, 1.5 per core)."""
    return _controller(config) and config.pluginmanager.has_plugin("dsession")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _controller(session.config):
        return  # the workers' tests are watched by the controller, before the first starts and after the last ends
    session.config.stash[_HOST_BEFORE] = hostcheck.snapshot()
    if _distributed(session.config) and _may_run_docker(session.config):
        _start_bystander(session.config)  # the workers have not collected yet: started before any test runs


def _may_run_docker(config: pytest.Config) -> bool:
    """Under xdist the controller sees no items: the Docker tests may run unless the marker expression leaves them out."""
    return "not docker" not in (config.getoption("markexpr", "") or "")


def pytest_collection_finish(session: pytest.Session) -> None:
    if _controller(session.config) and not _distributed(session.config) and any(
            item.get_closest_marker("docker") is not None for item in session.items):
        _start_bystander(session.config)


_RAN_DOCKER = pytest.StashKey[bool]()
_BYSTANDER_PROBLEMS = pytest.StashKey[list[str]]()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # in the controller, every worker's reports too: whether a Docker test ran, so the bystander is checked
    if report.when == "call" and "docker" in report.keywords:
        _CONFIG[0].stash[_RAN_DOCKER] = True


_CONFIG: list[pytest.Config] = []


def _start_bystander(config: pytest.Config) -> None:
    """Before the first test, when an engine answers: a container, network and volume the run did not make
    (``bystander.py``); why not, otherwise, for the check to report."""
    problem = _engine_problem(config)
    if problem:
        config.stash[bystander.KEY] = bystander.Bystander(why=problem)
        return
    import docker

    client = docker.from_env()
    try:
        made = bystander.start(client)
    except Exception as exc:  # noqa: BLE001 - the check reports it; the run goes on
        made = bystander.Bystander(why=f"the bystander could not be started: {type(exc).__name__}: {exc}")
    finally:
        client.close()
    config.stash[bystander.KEY] = made
    os.environ[bystander.ENV] = made.container  # for the workers xdist starts next (test_bystander.py spares it)


def _check_bystander(config: pytest.Config) -> list[str]:
    """After the last test: what happened to the bystander (``bystander.check``), then it goes. Only a run that ran a
    Docker test is judged; under CI such a run without a bystander fails too, as every Docker test does."""
    made = config.stash.get(bystander.KEY, None)
    ran = config.stash.get(_RAN_DOCKER, False)
    if made is None or not made.container:
        if ran and _in_ci():
            why = made.why if made is not None else "the session did not start one"
            return [f"no bystander to check: {why}; CI is set, so this fails instead of skipping"]
        return []
    import docker

    client = docker.from_env()
    try:
        return bystander.check(client, made) if ran else []
    except Exception as exc:  # noqa: BLE001 - no engine any more: that is what the check is for
        return [f"the engine did not answer at the end of the run: {type(exc).__name__}: {exc}"]
    finally:
        try:
            bystander.remove(client, made)
        except Exception:  # noqa: BLE001 - no engine any more: nothing to remove there
            pass
        client.close()


def _fail(session: pytest.Session) -> None:
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _controller(session.config):
        return
    _end_session_runs_root(session.config)
    problems = _check_bystander(session.config)
    if problems:
        session.config.stash[_BYSTANDER_PROBLEMS] = problems
        _fail(session)
    before = session.config.stash.get(_HOST_BEFORE, None)
    if before is None:
        return
    new = hostcheck.appeared(before, hostcheck.snapshot())
    if new:
        session.config.stash[_HOST_NEW] = new
        _fail(session)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    problems = config.stash.get(_BYSTANDER_PROBLEMS, None)
    if problems:
        terminalreporter.write_sep("=", "the run touched what it did not create (the bystander)", red=True, bold=True)
        for line in problems:
            terminalreporter.write_line(line, red=True)
    new = config.stash.get(_HOST_NEW, None)
    if new:
        terminalreporter.write_sep("=", "the host changed during this run", red=True, bold=True)
        terminalreporter.write_line(hostcheck.message(new), red=True)
