"""The ``sandbox-lab`` command line, run in-process (and once as a subprocess): output shapes and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import grader
from grader import backends
from grader.cli import main as cli
from grader.cli import commands as cli_commands
from grader.backends.base import Closing
from grader.backends.static import StaticBackend
from grader.core.errors import DockerUnavailable, InfrastructureError
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan
import fakewire
from endless import OFFERED, endless_pipe

REPO = Path(__file__).parents[3]
NAIVE = str(REPO / "examples" / "naive.json")
SECURE = str(REPO / "examples" / "secure.json")
PRACTICE = str(REPO / "solutions" / "scope-secure-sandbox.json")
FIXTURES = REPO / "tests" / "fixtures" / "policies"
PROBE_KEYS = {"id", "kind", "outcome", "explanation"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture
def bad_policy(tmp_path: Path) -> str:
    f = tmp_path / "bad.json"
    f.write_text('{"filesystem": {"allowWrites": ["/project/out"], "allowRead": ["src"]}, "network": {"allowedDomains": ["*"]}}')
    return str(f)


@pytest.fixture(autouse=True)
def _no_backend_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(backends.BACKEND_ENV, raising=False)
    monkeypatch.delenv("SANDBOX_LAB_DEBUG", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every Docker lookup fail as it does on a machine without an engine."""

    def refuse(progress: Any, shared: bool = False, runtime: Any = None) -> Any:
        raise DockerUnavailable("connection refused")

    monkeypatch.setattr(backends, "_docker", refuse)


# --- check ----------------------------------------------------------------------------------


def test_check_valid_prints_normal_form_warnings_and_findings(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", NAIVE)
    assert code == 0 and err == ""
    assert f"{NAIVE} is a valid policy" in out
    assert '"allowWrite": [\n      "/home/user"\n    ]' in out  # normalized: the trailing slash is gone
    # 3 of Sandbox Lab's own (2 on the wildcard, the secrets reads leave open), then 2 srt notes (what srt
    # protects only where it starts, its own settings it never protects)
    assert "5 warnings:" in out and "/network/allowedDomains/0" in out and "/filesystem/denyRead: 10 secrets" in out
    assert out.count("/filesystem/allowWrite/0: [srt 0.0.83] ") == 2
    assert "only in the directory srt starts in" in out and "does not protect its own settings file" in out
    assert out.index("Attacks") < out.index("Jobs")
    assert "write-shell-rc            blocked" in out  # srt keeps ~/.bashrc read-only, started in the home
    assert "9 of 17 attacks succeeded; 1 of 5 jobs work" in out


def test_check_invalid_reports_every_problem_on_stderr_with_exit_2(capsys: pytest.CaptureFixture[str], bad_policy: str) -> None:
    code, out, err = run(capsys, "check", bad_policy)
    assert code == 2 and out == ""
    assert f"{bad_policy} is not a valid policy (3 problems)" in err
    assert '/filesystem/allowWrites: unknown key' in err and 'Did you mean "allowWrite"?' in err
    assert "/filesystem/allowRead/0: relative path" in err
    assert '/network/allowedDomains/0: "*" would allow every host' in err


def test_check_json_valid_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", SECURE, "--json")
    data = json.loads(out)
    assert code == 0
    assert set(data) == {"valid", "source", "policy", "warnings", "findings", "summary", "srt_differences", "srt_missing"}
    assert data["valid"] is True
    assert data["policy"]["network"]["allowedDomains"] == ["registry.npmjs.org"]
    # reads are open by default: the lab's lint names the secrets left readable; srt has nothing to add
    assert [w["pointer"] for w in data["warnings"]] == ["/filesystem/denyRead"]
    assert data["srt_differences"] == []
    assert all(set(f) == PROBE_KEYS for f in data["findings"])
    assert {f["id"]: f["outcome"] for f in data["findings"]}["exfil-secret"] == "succeeded"


def test_check_json_warnings_shape(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run(capsys, "check", NAIVE, "--json")[1])
    assert data["warnings"] and all(set(w) == {"pointer", "message"} for w in data["warnings"])


def test_check_json_lists_srt_differences_under_their_own_key(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run(capsys, "check", NAIVE, "--json")[1])
    srt = data["srt_differences"]
    assert [(d["pointer"], d["cause"]) for d in srt] == [
        ("/filesystem/allowWrite/0", "mandatory-shell-rc"), ("/filesystem/allowWrite/0", "settings-not-protected"),
    ]
    assert all(set(d) == {"pointer", "message", "cause"} and d["message"].startswith("[srt 0.0.83] ") for d in srt)
    assert not any("[srt " in w["message"] for w in data["warnings"])  # the existing key keeps its meaning


def test_check_json_invalid_shape(capsys: pytest.CaptureFixture[str], bad_policy: str) -> None:
    code, out, err = run(capsys, "check", bad_policy, "--json")
    data = json.loads(out)
    assert code == 2 and err == ""
    assert data["valid"] is False
    assert [e["pointer"] for e in data["errors"]] == ["/filesystem/allowRead/0", "/filesystem/allowWrites", "/network/allowedDomains/0"]
    assert all(set(e) == {"pointer", "message"} for e in data["errors"])


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "the file is empty"),
        (b"{not json", "invalid JSON at line 1"),
        (b'{"filesystem": {"allowRead": [NaN]}}', "NaN and Infinity"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[]", "a policy is a JSON object"),
        (b'{"a": 1, "a": 2}', "appears more than once"),
        (b"[" * 100 + b"]" * 100, "nested deeper"),
    ],
)
def test_broken_files_never_print_a_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, fragment: str) -> None:
    f = tmp_path / "p.json"
    f.write_bytes(content)
    code, out, err = run(capsys, "check", str(f))
    assert code == 2 and fragment in err


def test_check_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "check", str(tmp_path / "missing.json"))
    assert code == 2 and "no such file" in err


# --- probe ----------------------------------------------------------------------------------


def test_probe_static_json_has_exactly_the_stable_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "probe", PRACTICE, "--backend", "static", "--json")
    data = json.loads(out)
    assert code == 0
    assert set(data) == {"backend", "policy", "probes", "scope"}
    assert set(data["scope"]) == {"readable", "writable", "reachable"}
    assert data["scope"]["readable"] == ["/project/src/main.py", "/project/src/test_main.py"]
    assert data["backend"] == "static"
    assert data["policy"]["filesystem"]["allowRead"] == ["/project/src"]
    assert [p["id"] for p in data["probes"]] == [p.id for p in grader.PROBES]
    assert all(set(p) == PROBE_KEYS for p in data["probes"])
    assert {p["kind"] for p in data["probes"]} == {"attack", "job"}


def test_probe_text_is_a_table_with_attacks_first(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "probe", NAIVE, "--backend", "static", "--color", "never")
    assert code == 0
    assert "\x1b" not in out
    assert out.index("read-ssh-key") < out.index("job-read-src")
    assert "9 of 17 attacks succeeded; 1 of 5 jobs work" in out


def test_probe_colour_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "probe", NAIVE, "--backend", "static", "--color", "always")[1]
    assert "\x1b[31msucceeded" in out  # an attack that succeeded: red
    assert "\x1b[32msucceeded" in out  # a job that works: green
    assert "\x1b" not in run(capsys, "probe", NAIVE, "--backend", "static")[1]  # auto: not a terminal


def test_probe_plain_container_needs_no_policy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "probe", "--plain-container", "--backend", "static", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["policy"] is None and data["sandbox"] == "baseline"
    assert {p["id"]: p["outcome"] for p in data["probes"]}["net-direct-ip"] == "succeeded"


def test_probe_plain_container_says_it_ignores_a_policy(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "probe", NAIVE, "--plain-container", "--backend", "static", "--json")
    assert code == 0 and "is not used" in err


def test_probe_without_policy_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "probe", "--backend", "static")
    assert code == 2 and "needs a POLICY" in err


def test_probe_invalid_policy_exits_2(capsys: pytest.CaptureFixture[str], bad_policy: str) -> None:
    code, out, err = run(capsys, "probe", bad_policy, "--backend", "static")
    assert code == 2 and out == "" and "is not a valid policy" in err


@pytest.mark.usefixtures("no_engine")
def test_probe_docker_without_engine_is_a_one_line_error_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "probe", PRACTICE, "--backend", "docker")
    assert code == 3 and out == ""
    assert err.count("\n") == 1
    assert "No Docker engine answers (connection refused)" in err


@pytest.mark.usefixtures("no_engine")
def test_probe_auto_without_engine_falls_back_to_a_prediction_that_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "probe", PRACTICE, "--json")
    data = json.loads(out)
    assert code == 0
    assert data["backend"] == "static"
    assert data["notes"] == ["predicted, not run: no Docker engine answers (connection refused)"]
    assert "predicted, not run" in err
    text = run(capsys, "probe", PRACTICE)[1]
    assert "note: predicted, not run: no Docker engine answers (connection refused)" in text


def test_backend_environment_variable_changes_the_default(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(backends.BACKEND_ENV, "static")
    monkeypatch.setattr(backends, "_docker", lambda progress, shared=False, runtime=None: pytest.fail("docker must not be tried"))
    assert json.loads(run(capsys, "probe", PRACTICE, "--json")[1])["backend"] == "static"
    monkeypatch.setenv(backends.BACKEND_ENV, "podman")
    code, _, err = run(capsys, "probe", PRACTICE)
    assert code == 2 and "SANDBOX_LAB_BACKEND" in err and "unknown backend" in err


class _Failing(Closing):  # the CLI closes every backend it creates
    name = "docker"

    def run(self, plan: RunPlan) -> RunResult:
        raise InfrastructureError("the internet service stopped during the run\nsecond line")


def test_a_failed_run_is_a_one_line_error_exit_3(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "get", lambda name, progress=None, shared=False: _Failing())
    code, out, err = run(capsys, "probe", PRACTICE, "--backend", "docker")
    assert code == 3 and out == ""
    assert err == "sandbox-lab: the internet service stopped during the run\n"


def test_ctrl_c_is_exit_130_with_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    class Interrupted(StaticBackend):
        def run(self, plan: RunPlan) -> RunResult:
            raise KeyboardInterrupt

    monkeypatch.setattr(backends, "get", lambda name, progress=None, shared=False: Interrupted())
    code, _, err = run(capsys, "probe", PRACTICE, "--backend", "static")
    assert code == 130 and err == "sandbox-lab: interrupted\n"


def test_an_internal_error_is_reported_without_a_traceback(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(cli_commands, "predict", boom)
    code, _, err = run(capsys, "check", NAIVE)
    assert code == 4
    assert "internal error: RuntimeError: unexpected" in err and "SANDBOX_LAB_DEBUG" in err


# --- schema, export, version, usage -----------------------------------------------------------


def test_schema_is_valid_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schema")
    schema = json.loads(out)
    assert code == 0
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"$schema", "filesystem", "network"}


def test_export_srt_has_all_five_arrays_and_comments_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "export", PRACTICE, "--to", "srt")
    data = json.loads(out)
    assert code == 0
    assert set(data["filesystem"]) == {"denyRead", "allowRead", "allowWrite", "denyWrite"}
    assert set(data["network"]) == {"allowedDomains", "deniedDomains"}
    assert all(isinstance(v, list) for part in data.values() for v in part.values())
    lines = err.splitlines()
    assert lines and all(line.startswith("# ") for line in lines)
    assert data["filesystem"]["denyRead"] == ["/home/user", "/etc/secrets", "/project", "/app/workspace"]  # as written
    assert any("mandatory protections" in line for line in lines)
    assert not any("allow-only reads" in line for line in lines)


def test_export_claude_code_is_a_sandbox_block(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run(capsys, "export", SECURE, "--to", "claude-code")[1])
    assert data["sandbox"]["enabled"] is True
    assert data["sandbox"]["network"]["allowedDomains"] == ["registry.npmjs.org"]


def test_export_docker_is_a_shell_snippet(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "export", SECURE, "--to", "docker")[1]
    assert out.startswith("#!/bin/sh\n") and "docker run" in out and "--cap-drop ALL" in out


def test_export_invalid_policy_exits_2(capsys: pytest.CaptureFixture[str], bad_policy: str) -> None:
    code, out, _ = run(capsys, "export", bad_policy, "--to", "srt")
    assert code == 2 and out == ""


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["export", NAIVE], ["export", NAIVE, "--to", "podman"], ["probe", NAIVE, "--backend", "x"]])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert run(capsys, *argv)[0] == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == f"sandbox-lab {grader.__version__}\n"


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for name in ("check", "probe", "schema", "export"):
        assert name in out


def test_every_command_is_registered_once() -> None:
    names = [c.name for c in cli.COMMANDS]
    assert sorted(names) == sorted(set(names)) == ["attack", "check", "class-keys", "class-report", "cleanup", "engine", "export", "grade", "grade-batch", "import", "probe", "schema", "serve", "setup", "tasks", "tokens", "worker"]


# --- as a real process ----------------------------------------------------------------------


# what a command imports before it does anything: the modules, never a time (a loaded machine is slow)
_IMPORTED = r"""
import contextlib, io, json, sys
from grader.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""
_NEVER_ON_THE_COMMAND_PATH = ("docker", "ipywidgets", "grader.notebook.widgets", "grader.backends.docker.backend")
# what no light command may import (issue 26): the Docker SDK, the notebook and widget stack, the run service's
# web and queue libraries, plotting, and the package's own modules that only other commands need
_HEAVY_LIBRARIES = ("docker", "ipywidgets", "IPython", "ipykernel", "nbformat", "nbclient", "nbconvert", "jupytext",
                    "fastapi", "starlette", "uvicorn", "rq", "redis", "prometheus_client", "matplotlib", "numpy", "httpx")
_HEAVY_MODULES = ("grader.backends.docker", "grader.backends.static", "grader.backends.srt", "grader.backends.remote",
                  "grader.hosted", "grader.course", "grader.notebook", "grader.grading.grade", "grader.grading.batch",
                  "grader.grading.tasks", "grader.grading.class_report", "grader.core.plan", "grader.realtools.export",
                  "grader.realtools.machine", "grader.realtools.importer", "grader.realtools.semantics")


def _imported(*argv: str, code: int = 0) -> set[str]:
    done = subprocess.run([sys.executable, "-c", _IMPORTED, *argv], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["code"] == code
    return set(got["modules"])


def _heavy(mods: set[str], allowed: tuple[str, ...] = ()) -> set[str]:
    """The modules of ``mods`` no light command may import (a package counts with its submodules)."""
    def under(m: str, roots: tuple[str, ...]) -> bool:
        return any(m == r or m.startswith(r + ".") for r in roots)

    return {m for m in mods if (m.split(".")[0] in _HEAVY_LIBRARIES or under(m, _HEAVY_MODULES)) and not under(m, allowed)}


def test_help_imports_neither_pydantic_nor_the_pipeline_nor_docker() -> None:
    mods = _imported("--help")
    assert not {m for m in mods if m.split(".")[0] in ("pydantic", "pydantic_core", "docker", "ipywidgets")}
    # the analyzer, the policy model, the grader and the command bodies load only when a command runs
    assert not mods & {"grader.core.policy", "grader.core.analyzer", "grader.grading.grade", "grader.grading.batch",
                       "grader.cli.commands", "grader.realtools.export", "grader.backends.static"}
    assert "grader.cli.main" in mods  # the probe itself ran


def test_check_imports_what_it_uses_and_nothing_of_docker_grading_or_widgets() -> None:
    mods = _imported("check", "examples/naive.json")
    assert {"grader.core.policy", "grader.core.analyzer"} <= mods
    assert not mods & {*_NEVER_ON_THE_COMMAND_PATH, "grader.grading.grade", "grader.grading.batch", "grader.realtools.semantics"}


@pytest.mark.parametrize("argv, code", [
    (("--help",), 0),
    (("check", "--help"), 0),
    (("check", "examples/naive.json"), 0),
    (("check", "--json", "examples/naive.json"), 0),
    (("check", "tests/fixtures/policies/many-problems.json"), 2),  # the error path renders problems, no more
    (("check", "--json", "tests/fixtures/policies/many-problems.json"), 2),
    (("check", "no-such-policy.json"), 2),
])
def test_help_and_check_import_no_heavy_library_and_no_other_commands_modules(argv: tuple[str, ...], code: int) -> None:
    # sys.modules at exit, never a time: `--help` and `check` start fast because they import little (bench/cli_speed.py)
    mods = _imported(*argv, code=code)
    assert "grader.cli.main" in mods  # the probe itself ran
    assert _heavy(mods) == set()


def test_probe_on_the_static_backend_imports_no_engine_and_no_notebook_stack() -> None:
    mods = _imported("probe", "examples/naive.json", "--backend", "static")
    assert "grader.backends.static" in mods and "grader.core.plan" in mods  # it did run the plan
    assert _heavy(mods, allowed=("grader.backends.static", "grader.core.plan")) == set()


_PLUGIN_SCANS = r"""
import contextlib, importlib.metadata as md, io, json, sys
scans = []
real = md.entry_points
md.entry_points = lambda *a, **k: scans.append(k.get("group")) or real(*a, **k)  # before pydantic binds it
from grader.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "scans": scans}))
"""


@pytest.mark.parametrize("setting, scanned", [(None, False), ("", True)])
def test_check_does_not_scan_installed_packages_for_pydantic_plugins_unless_asked(setting: Any, scanned: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if setting is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = setting  # the caller's own choice wins: empty loads plugins again
    done = subprocess.run([sys.executable, "-c", _PLUGIN_SCANS, "check", "examples/naive.json"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=env)
    got = json.loads(done.stdout)
    assert got["code"] == 0, done.stderr
    assert ("pydantic" in got["scans"]) is scanned


@pytest.mark.parametrize("policy, code", [("examples/naive.json", 0), ("tests/fixtures/policies/many-problems.json", 2)])
def test_the_console_entry_exits_with_mains_code_after_freezing_its_objects_out_of_the_collector(policy: str, code: int) -> None:
    # the interpreter's shutdown collections skip what the command made (bench/probe_speed.py: its exit phase);
    # exit handlers still run: this one reports the freeze, as a temporary directory's cleanup would run
    script = ("import atexit, gc, sys; atexit.register(lambda: sys.stderr.write(f'frozen={gc.get_freeze_count()}\\n')); "
              f"sys.argv = ['sandbox-lab', 'check', {policy!r}]; from grader.cli.main import entry; entry()")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    frozen = int(done.stderr.rsplit("frozen=", 1)[1].split()[0])
    assert frozen > 1000


def test_the_import_guard_sees_a_heavy_import() -> None:
    # attack the guard itself: a command path that pulled in the Docker SDK or the exporter would be caught
    assert _heavy({"grader.cli.main", "docker", "docker.errors"}) == {"docker", "docker.errors"}
    assert _heavy({"grader.realtools.export", "grader.realtools.srt_notes"}) == {"grader.realtools.export"}
    assert _heavy({"grader.backends", "grader.backends.static"}) == {"grader.backends.static"}
    assert _heavy({"rqlite", "dockerfile_parse"}) == set()  # a prefix of a name is not the name


def test_a_commands_help_still_shows_the_defaults_read_from_the_api() -> None:
    parser = cli.build_parser("grade-batch")
    sub = next(a for a in parser._actions if a.dest == "command_name").choices["grade-batch"]  # type: ignore[union-attr]
    from grader.grading.batch import grade_batch
    from grader.plumbing.terminal import api_default

    assert f"(default: {api_default(grade_batch, 'workers')})" in sub.format_help()


def test_python_dash_m_grader_check_as_a_subprocess(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "grader", "check", "examples/naive.json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "examples/naive.json is a valid policy" in ok.stdout
    bad = tmp_path / "bad.json"
    bad.write_text('{"network": {"allowedDomains": ["*"]}}')
    failed = subprocess.run([sys.executable, "-m", "grader", "check", str(bad)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 2
    assert "Traceback" not in failed.stderr and '"*" would allow every host' in failed.stderr


# --- one exit-code table for every command --------------------------------------------------

TASK = "scope-secure-sandbox"  # PRACTICE is its reference solution


def test_help_prints_the_exit_code_table(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "--help")[1]
    assert "exit codes" in out
    for code, meaning in cli.EXIT_CODES:
        assert f"  {code:<4} {meaning}" in out
    assert [code for code, _ in cli.EXIT_CODES] == [0, 1, 2, 3, 4, 130]


def test_the_cli_page_documents_the_same_exit_code_table() -> None:
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")  # the README's table, moved with the command line
    lines = page[page.index("## Exit codes"):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = lines[start:start + next(i for i, line in enumerate(lines[start:]) if not line.startswith("|"))]
    rows = table[2:]  # after the header and its rule
    documented = [tuple(cell.strip() for cell in row.strip("|").split("|")) for row in rows]
    assert documented == [(str(code), meaning) for code, meaning in cli.EXIT_CODES]


def _interrupt(*args: Any, **kwargs: Any) -> Any:
    raise KeyboardInterrupt


def _bug(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("unexpected")


@pytest.mark.usefixtures("no_engine")
def test_every_exit_code_is_reachable(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bad_policy: str) -> None:
    reached = {
        run(capsys, "grade", "--task", TASK, PRACTICE, "--backend", "static")[0]: "full marks",
        run(capsys, "grade", "--task", TASK, NAIVE, "--backend", "static")[0]: "below full marks",
        run(capsys, "check", bad_policy)[0]: "invalid policy",
        run(capsys, "probe", PRACTICE, "--backend", "docker")[0]: "no engine",
    }
    monkeypatch.setattr(cli_commands, "predict", _bug)
    reached[run(capsys, "check", NAIVE)[0]] = "internal error"
    monkeypatch.setattr(cli_commands, "predict", _interrupt)
    reached[run(capsys, "check", NAIVE)[0]] = "interrupted"
    assert reached == {0: "full marks", 1: "below full marks", 2: "invalid policy", 3: "no engine", 4: "internal error", 130: "interrupted"}
    assert sorted(reached) == sorted(code for code, _ in cli.EXIT_CODES)


class _LosesOne(Closing):
    """The static run with one probe's evidence lost, as a Docker run whose log was cut reports it."""

    name = "docker"

    def __init__(self, lost: str) -> None:
        self.lost = lost

    def run(self, plan: RunPlan) -> RunResult:
        from dataclasses import replace

        r = StaticBackend().run(plan)
        return replace(r, backend="docker", probes=tuple(
            replace(p, outcome="error", explanation="Cannot tell: the run's evidence cannot be read whole (dns.jsonl: cut off).")
            if p.id == self.lost else p for p in r.probes))


def test_grade_and_probe_with_evidence_that_could_not_be_judged_exit_3_never_full_marks(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.grading.tasks import load_task

    task = load_task(TASK)
    lost = next(pid for c in task.checks if c.kind == "blocked" for pid in c.probes)
    hit = [c.id for c in task.checks if lost in c.probes]
    monkeypatch.setattr(backends, "_docker", lambda progress, shared=False, runtime=None: _LosesOne(lost))
    assert run(capsys, "grade", "--task", TASK, PRACTICE, "--backend", "static")[0] == 0  # the same policy, judged whole
    code, out, err = run(capsys, "grade", "--task", TASK, PRACTICE, "--backend", "docker")
    assert code == 3 and f"could not grade {', '.join(hit)}" in err
    assert f"/{task.max_score} " in out and f"{task.max_score}/{task.max_score}" not in out.splitlines()[0]
    assert all(f"[ERROR] {i} (0/" in out for i in hit) and "could not grade: probe " + lost in out
    code, out, _ = run(capsys, "grade", "--task", TASK, PRACTICE, "--backend", "docker", "--json")
    data = json.loads(out)
    assert code == 3 and data["could_not_grade"] == hit and data["score"] < data["max_score"]
    assert all(c["points"] == 0 and "dns.jsonl: cut off" in c["error"] for c in data["checks"] if c["id"] in hit)
    for argv in (("probe", PRACTICE, "--backend", "docker"), ("probe", PRACTICE, "--backend", "docker", "--json")):
        code, out, err = run(capsys, *argv)
        assert code == 3 and f"could not judge {lost}" in err, err
    assert run(capsys, "probe", PRACTICE, "--backend", "static")[0] == 0


def test_an_internal_error_is_not_a_grade_below_full_marks(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import grader.grading.grade

    cli.build_parser()  # the parser reads grade's defaults once, before the bug is planted
    monkeypatch.setattr(grader.grading.grade, "grade", _bug)
    code, out, err = run(capsys, "grade", "--task", TASK, PRACTICE, "--backend", "static")
    assert code == cli.EXIT_INTERNAL == 4 and out == ""
    assert "internal error: RuntimeError: unexpected" in err


def test_debug_shows_the_traceback_of_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_DEBUG", "1")
    monkeypatch.setattr(cli_commands, "predict", _bug)
    with pytest.raises(RuntimeError, match="unexpected"):
        cli.main(["check", NAIVE])


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_ctrl_c_in_grade_batch_is_130_and_says_how_to_resume(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, json_flag: list[str]
) -> None:
    import grader.grading.batch

    monkeypatch.setattr(grader.grading.batch, "grade", _interrupt)
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ada.json").write_text(Path(PRACTICE).read_text())
    code, out, err = run(capsys, "grade-batch", "--task", TASK, str(subs), "--out", str(tmp_path / "out"), "--backend", "static", *json_flag)
    assert code == 130
    message = json.loads(out)["error"] if json_flag else err.splitlines()[-1]
    assert "interrupted" in message and str(tmp_path / "out" / "journal.jsonl") in message and "rerun" in message


def test_a_closed_pipe_stops_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    class Closed:
        def write(self, text: str) -> int:
            raise BrokenPipeError

        def fileno(self) -> int:
            raise ValueError("no descriptor")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert cli.main(["schema"]) == cli.EXIT_INTERRUPTED


# --- --json everywhere, errors included -------------------------------------------------------


@pytest.fixture
def fake_docker(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """setup and cleanup against a recorded fake: what each API function was called with."""
    from grader.backends.docker import backend as docker_backend
    from grader.backends.docker import images as images_module

    calls: list[tuple[str, dict[str, Any]]] = []

    def ensure_images(client: Any, progress: Any, **kwargs: Any) -> Any:
        calls.append(("ensure_images", kwargs))
        progress("building (pretend)")
        return images_module.Images(sandbox="sandbox-lab/sandbox:0123456789ab", services="sandbox-lab/services:0123456789ab")

    def cleanup(client: Any, **kwargs: Any) -> list[str]:
        calls.append(("cleanup", kwargs))
        return ["container sandbox-lab-run-1", "network sandbox-lab-net-1"]

    monkeypatch.setattr(docker_backend, "client_from_env", lambda: object())
    monkeypatch.setattr(images_module, "ensure_images", ensure_images)
    monkeypatch.setattr(docker_backend, "cleanup", cleanup)
    return calls


@pytest.fixture
def submissions(tmp_path: Path) -> Path:
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ada.json").write_text(Path(PRACTICE).read_text())
    (subs / "bob.json").write_text(Path(NAIVE).read_text())
    (subs / "eve.json").write_text("{")
    return subs


@pytest.mark.usefixtures("fake_docker")
def test_every_reporting_command_prints_json(capsys: pytest.CaptureFixture[str], tmp_path: Path, submissions: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    out_dir = tmp_path / "grades"
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_DIR", str(tmp_path / "service"))
    settings = tmp_path / "srt-settings.json"
    settings.write_text('{"filesystem": {"denyRead": [], "allowWrite": ["/tmp/x/out"], "denyWrite": []}, "network": {"allowedDomains": [], "deniedDomains": []}}')
    secret = _secret_file(tmp_path)
    argvs = {
        "check": ["check", NAIVE],
        "probe": ["probe", NAIVE, "--backend", "static"],
        "tasks": ["tasks"],
        "grade": ["grade", "--task", TASK, NAIVE, "--backend", "static"],
        "grade-batch": ["grade-batch", "--task", TASK, str(submissions), "--out", str(out_dir), "--backend", "static"],
        "class-report": ["class-report", str(out_dir)],  # over the gradebook grade-batch just wrote
        "export": ["export", PRACTICE, "--to", "srt"],
        "import": ["import", str(settings), "--from", "srt", "--project-root", "/tmp/x"],
        "setup": ["setup"],
        "cleanup": ["cleanup"],
        "attack": ["attack", "--list"],
        "tokens": ["tokens", "issue", "--name", "cli-json"],
        "class-keys": ["class-keys", "--secret-file", secret, "ada"],
        "engine": ["engine", "status"],
    }
    with_json = {c.name for c in cli.COMMANDS if any("--json" in a.flags for a in c.args)}
    assert with_json == set(argvs)  # schema prints JSON anyway
    data = {}
    for name, argv in argvs.items():
        code, out, _ = run(capsys, *argv, "--json")
        assert code in (0, 1), name
        data[name] = json.loads(out)
    assert data["grade"]["backend"] == "static" and data["grade"]["score"] < data["grade"]["max_score"]
    batch = data["grade-batch"]
    assert batch["task"] == TASK and batch["backend"] == "static"
    assert [(r["student"], r["status"]) for r in batch["rows"]] == [("ada", "ok"), ("bob", "ok"), ("eve", "invalid")]
    assert batch["counts"]["full_marks"] == 1 and batch["runs"] == 2
    assert batch["files"] == {"csv": str(out_dir / "gradebook.csv"), "json": str(out_dir / "gradebook.json"), "journal": str(out_dir / "journal.jsonl")}
    assert all(Path(p).is_file() for p in batch["files"].values())
    assert data["class-report"]["students"] == 3 and Path(data["class-report"]["files"]["html"]).is_file()
    assert "/project/src" in json.loads(data["export"]["text"])["filesystem"]["allowRead"]
    assert data["export"]["target"] == "srt" and any("mandatory protections" in w for w in data["export"]["warnings"])
    assert data["setup"] == {"sandbox": "sandbox-lab/sandbox:0123456789ab", "services": "sandbox-lab/services:0123456789ab"}
    assert data["cleanup"] == {"removed": ["container sandbox-lab-run-1", "network sandbox-lab-net-1"], "count": 2}
    assert [lv["number"] for lv in data["attack"]["levels"]][:3] == [1, 2, 3]
    assert data["tokens"]["name"] == "cli-json" and data["tokens"]["token"].startswith("sl_")
    assert [k["student"] for k in data["class-keys"]["keys"]] == ["ada"]


def test_export_json_holds_the_text_and_the_warnings_of_the_text_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "export", PRACTICE, "--to", "srt", "--json")
    data = json.loads(out)
    assert code == 0 and err == ""
    assert data["warnings"]
    _, text, comments = run(capsys, "export", PRACTICE, "--to", "srt")
    assert data["text"] == text and [f"# {w}" for w in data["warnings"]] == comments.splitlines()


@pytest.mark.usefixtures("no_engine")
@pytest.mark.parametrize(
    ("argv", "code", "fragment", "problems"),
    [
        (["probe", "BAD", "--backend", "static"], 2, "is not a valid policy (3 problems)", 3),
        (["export", "BAD", "--to", "srt"], 2, "is not a valid policy (3 problems)", 3),
        (["grade", "--task", "no-such-task", PRACTICE, "--backend", "static"], 2, "unknown task", 0),
        (["grade-batch", "--task", TASK, "MISSING", "--backend", "static"], 2, "no such directory or CSV file", 0),
        (["probe", PRACTICE, "--backend", "docker"], 3, "No Docker engine answers (connection refused)", 0),
        (["probe", "--backend", "static"], 2, "needs a POLICY", 0),
        (["grade", PRACTICE], 2, "the following arguments are required: --task", 0),
        (["grade-batch", "--task", TASK, "x", "--workers", "0"], 2, "must be at least 1", 0),
        (["frobnicate"], 2, "invalid choice", 0),
    ],
)
def test_errors_under_json_are_json_on_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, bad_policy: str, argv: list[str], code: int, fragment: str, problems: int
) -> None:
    argv = [bad_policy if a == "BAD" else str(tmp_path / "missing") if a == "MISSING" else a for a in argv]
    got, out, err = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert got == code and err == ""
    assert set(data) == {"error", "problems"}
    assert fragment in data["error"] and len(data["problems"]) == problems
    assert all(set(p) == {"pointer", "message"} for p in data["problems"])
    assert run(capsys, *argv)[0] == code  # the same exit code without --json


def test_check_and_grade_add_the_shared_error_keys_to_their_own_json(capsys: pytest.CaptureFixture[str], bad_policy: str) -> None:
    code, out, _ = run(capsys, "check", bad_policy, "--json")
    data = json.loads(out)
    assert code == 2 and data["valid"] is False and data["problems"] == data["errors"] and "not a valid policy" in data["error"]
    code, out, _ = run(capsys, "grade", "--task", TASK, bad_policy, "--backend", "static", "--json")
    data = json.loads(out)
    assert code == 2 and data["score"] == 0 and data["problems"] == data["errors"] and "not a valid policy" in data["error"]


def test_internal_error_and_interrupt_under_json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_commands, "predict", _bug)
    code, out, err = run(capsys, "check", NAIVE, "--json")
    assert code == 4 and err == ""
    assert json.loads(out)["error"].startswith("internal error: RuntimeError: unexpected")
    monkeypatch.setattr(cli_commands, "predict", _interrupt)
    code, out, _ = run(capsys, "check", NAIVE, "--json")
    assert code == 130 and json.loads(out) == {"error": "interrupted", "problems": []}


def test_setup_and_cleanup_without_an_engine_exit_3(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.backends.docker import backend as docker_backend

    def refuse() -> Any:
        raise DockerUnavailable("connection refused")

    monkeypatch.setattr(docker_backend, "client_from_env", refuse)
    for command in ("setup", "cleanup"):
        code, out, err = run(capsys, command)
        assert code == 3 and out == "" and err.startswith("sandbox-lab: ") and err.count("\n") == 1, command
        code, out, err = run(capsys, command, "--json")
        assert code == 3 and err == "" and json.loads(out)["problems"] == [], command


# --- SANDBOX_LAB_BACKEND, for every command that picks a backend --------------------------------

BACKEND_ARGV = {
    "probe": ["probe", PRACTICE, "--json"],
    "grade": ["grade", "--task", TASK, PRACTICE, "--json"],
    "grade-batch": ["grade-batch", "--task", TASK, "SUBS", "--out", "OUT", "--json"],
}


def test_the_backend_commands_are_all_tested() -> None:
    picks = {c.name for c in cli.COMMANDS if any("--backend" in a.flags for a in c.args)}
    # attack runs code, which only Docker can: its backend choice is tested in the attack section below
    assert picks == set(BACKEND_ARGV) | {"attack"}


def _argv(name: str, submissions: Path, tmp_path: Path) -> list[str]:
    return [str(submissions) if a == "SUBS" else str(tmp_path / "out") if a == "OUT" else a for a in BACKEND_ARGV[name]]


@pytest.mark.parametrize("name", sorted(BACKEND_ARGV))
def test_backend_environment_variable_is_honoured(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, submissions: Path, name: str
) -> None:
    monkeypatch.setattr(backends, "_docker", lambda progress, shared=False, runtime=None: pytest.fail("docker must not be tried"))
    monkeypatch.setenv(backends.BACKEND_ENV, "static")
    code, out, _ = run(capsys, *_argv(name, submissions, tmp_path))
    assert code == 0 and json.loads(out)["backend"] == "static"


@pytest.mark.parametrize("name", sorted(BACKEND_ARGV))
def test_a_bad_backend_environment_variable_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, submissions: Path, name: str
) -> None:
    monkeypatch.setenv(backends.BACKEND_ENV, "podman")
    argv = _argv(name, submissions, tmp_path)
    code, out, err = run(capsys, *[a for a in argv if a != "--json"])
    assert code == 2 and out == ""
    assert err == (
        f"sandbox-lab {name}: error: SANDBOX_LAB_BACKEND: unknown backend 'podman'; choose one of: "
        f"{', '.join(backends.BACKEND_NAMES)}\n"
    )
    code, out, _ = run(capsys, *argv)
    assert code == 2 and "SANDBOX_LAB_BACKEND" in json.loads(out)["error"]
    assert not (tmp_path / "out").exists()  # nothing graded, nothing left behind
    # --backend still wins over the variable
    assert run(capsys, *argv, "--backend", "static")[0] == 0


@pytest.mark.usefixtures("no_engine")
@pytest.mark.parametrize("name", sorted(BACKEND_ARGV))
def test_backend_docker_from_the_environment_does_not_fall_back(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, submissions: Path, name: str
) -> None:
    monkeypatch.setenv(backends.BACKEND_ENV, "docker")
    code, out, _ = run(capsys, *_argv(name, submissions, tmp_path))
    assert code == 3 and "No Docker engine answers" in json.loads(out)["error"]


# --- defaults come from the API -----------------------------------------------------------------


def test_grade_batch_defaults_are_the_api_defaults() -> None:
    import inspect

    from grader.grading.batch import grade_batch

    api = inspect.signature(grade_batch).parameters
    args = cli.build_parser().parse_args(["grade-batch", "--task", TASK, "subs"])
    assert args.workers == api["workers"].default
    assert args.dedupe == api["dedupe"].default
    assert args.backend is None  # backends.default() decides, honouring SANDBOX_LAB_BACKEND
    flipped = cli.build_parser().parse_args(["grade-batch", "--task", TASK, "subs", "--no-dedupe", "--workers", "7"])
    assert flipped.dedupe is False and flipped.workers == 7


def test_help_shows_the_api_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    import inspect

    from grader.grading.batch import grade_batch

    out = run(capsys, "grade-batch", "--help")[1]
    assert f"(default: {inspect.signature(grade_batch).parameters['workers'].default})" in " ".join(out.split())
    assert f"else {inspect.signature(backends.default).parameters['prefer'].default}" in " ".join(out.split())


@pytest.mark.parametrize("name", ["probe", "grade", "grade-batch"])
def test_backend_flag_has_no_default_of_its_own(name: str) -> None:
    argv = {"probe": ["probe", NAIVE], "grade": ["grade", "--task", TASK, NAIVE], "grade-batch": ["grade-batch", "--task", TASK, "subs"]}[name]
    assert cli.build_parser().parse_args(argv).backend is None


def test_setup_and_cleanup_flags_leave_the_api_default_alone(capsys: pytest.CaptureFixture[str], fake_docker: list[tuple[str, dict[str, Any]]],
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path))  # cleanup --all stops the warm engines there: none of the user's
    assert run(capsys, "setup")[0] == run(capsys, "setup", "--rebuild")[0] == 0
    assert run(capsys, "cleanup")[0] == run(capsys, "cleanup", "--all")[0] == 0
    # left out, a flag is not passed, so the function's own default applies
    assert fake_docker == [("ensure_images", {}), ("ensure_images", {"rebuild": True}), ("cleanup", {}), ("cleanup", {"everything": True})]


def test_setup_and_cleanup_flags_turn_on_what_the_api_leaves_off() -> None:
    import inspect

    from grader.backends.docker.backend import cleanup
    from grader.backends.docker.images import ensure_images

    # a store_true flag means something only while the API's default is False
    assert inspect.signature(ensure_images).parameters["rebuild"].default is False
    assert inspect.signature(cleanup).parameters["everything"].default is False


def test_no_backend_name_table_of_its_own() -> None:
    choices = [dict(a.options)["choices"] for c in cli.COMMANDS for a in c.args if "--backend" in a.flags]
    assert len(choices) == len(BACKEND_ARGV) + 1 and all(c is backends.BACKEND_NAMES for c in choices)


# --- attack (capture the flag) ------------------------------------------------------------------


class _FakeEngine(Closing):
    """Stands in for Docker: runs nothing, and reports what the simulated internet would log for a marked attack.

    An attack containing ``SEND_FLAG`` "sends" the flag it was given to the gist host; any other attack sends nothing.
    One containing ``CUT_LOG`` comes back with a cut log (the evidence's ``infra_problem``).
    """

    name = "docker"

    def __init__(self) -> None:
        self.jobs: list[Any] = []

    def execute(self, plan: RunPlan, job: Any) -> Any:
        from grader.core.evidence import Evidence
        from grader.core.execution import Execution

        self.jobs.append((plan, job))
        flag = next(iter(job.plant.values())).strip()
        http = (fakewire.http(host="gist.github.com", method="POST", path="/", body=flag),) if "SEND_FLAG" in job.code else ()
        cut = "the run's evidence cannot be read whole (http.jsonl: cut off)" if "CUT_LOG" in job.code else ""
        ev = Evidence(token="t", canaries={}, records=(), before={}, after={}, network=plan.network, http=http, infra_problem=cut)
        return Execution(backend="docker", output="attack says hi\n", exit_code=0, timed_out=False, evidence=ev)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> _FakeEngine:
    fake = _FakeEngine()
    monkeypatch.setattr(backends, "_docker", lambda progress, shared=False, runtime=None: fake)
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))
    return fake


def _attack_file(tmp_path: Path, code: str) -> str:
    f = tmp_path / "attack.py"
    f.write_text(code)
    return str(f)


def test_attack_list_is_the_ladder_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    from grader.course.ladder import load_levels

    code, out, _ = run(capsys, "attack", "--list", "--json")
    assert code == 0
    assert json.loads(out) == {"levels": [{"number": lv.number, "id": lv.id, "title": lv.title} for lv in load_levels()]}
    code, out, _ = run(capsys, "attack", "--list")
    assert code == 0 and "naive-gist" in out and "attack --level N ATTACK.py" in out


def test_a_capture_exits_0_with_the_sink_and_its_evidence(capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: _FakeEngine) -> None:
    code, out, _ = run(capsys, "attack", "--level", "2", _attack_file(tmp_path, "# SEND_FLAG"), "--backend", "docker", "--json")
    data = json.loads(out)
    assert code == 0 and list(data) == ["level", "captured", "sinks", "output", "hint", "hint_from", "findings", "lesson"]
    assert data["level"] == 2 and data["captured"] is True and data["hint"] == "" and data["output"] == "attack says hi\n"
    assert data["lesson"]["id"] == "naive-gist" and data["lesson"]["teaches"].startswith("A trusted domain is not a safe domain")
    assert data["sinks"][0]["host"] == "gist.github.com" and "logged POST" in data["sinks"][0]["evidence"]
    plan, job = engine.jobs[0]
    assert plan.allowed_domains == ("*.github.com",) and set(job.plant) == {"/etc/secrets/db_password"}


def test_a_miss_exits_1_with_the_policy_and_the_next_hint_each_time(capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: _FakeEngine) -> None:
    from grader.course.ladder import level
    from grader.course.progress import load_progress

    lv = level(2)
    attack = _attack_file(tmp_path, "print('hi')")
    code, out, _ = run(capsys, "attack", "--level", "2", attack)
    assert code == 1 and "Not captured (attempt 1)" in out and '"allowedDomains": ["*.github.com"]' in out
    assert "Hint: " + lv.hints[0][:40] in out and "attack says hi" in out
    code, out, _ = run(capsys, "attack", "--level", "2", attack, "--json")
    assert code == 1 and json.loads(out)["hint"] == lv.hints[1]
    run(capsys, "attack", "--level", "naive-gist", _attack_file(tmp_path, "# SEND_FLAG"))
    rec = load_progress().level(lv.item_id)
    assert (rec.attempts, rec.hints, rec.captured is not None) == (3, 2, True)
    assert run(capsys, "attack", "--list")[1].splitlines()[1].startswith("✓  2  naive-gist")


def test_an_attack_that_could_not_be_judged_exits_3_and_is_no_attempt(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                      engine: _FakeEngine) -> None:
    from grader.course.ladder import level
    from grader.course.progress import load_progress

    lv = level(2)
    cut = _attack_file(tmp_path, "print('hi')  # CUT_LOG")
    code, out, err = run(capsys, "attack", "--level", "2", cut, "--json")
    data = json.loads(out)
    assert code == 3 and data["captured"] is None and data["hint"] == "" and data["problems"] == []
    assert data["error"].startswith("could not judge the attack:") and "cut off" in data["error"]
    assert "could not judge" in err
    code, out, err = run(capsys, "attack", "--level", "2", cut)
    assert code == 3 and "could not judge this attack" in out and "cut off" in out
    assert "Not captured" not in out and "Hint:" not in out and "not counted" in err
    assert load_progress().level(lv.item_id).attempts == 0  # no attempt: the next real miss gets the first hint
    code, out, _ = run(capsys, "attack", "--level", "2", _attack_file(tmp_path, "print('hi')"), "--json")
    assert code == 1 and json.loads(out)["hint"] == lv.hints[0] and json.loads(out)["captured"] is False
    assert "error" not in json.loads(out)
    # a sighting is proof whatever else failed: the flag is fresh and random
    code, out, _ = run(capsys, "attack", "--level", "2", _attack_file(tmp_path, "# SEND_FLAG CUT_LOG"), "--json")
    assert code == 0 and json.loads(out)["captured"] is True
    assert load_progress().level(lv.item_id).attempts == 2


def test_attack_solution_shows_it_records_the_asking_and_runs_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                     engine: _FakeEngine) -> None:
    from grader.course.ladder import level, load_levels
    from grader.course.reveals import solutions_shown
    from grader.course.progress import load_progress

    lv = level(2)
    assert lv.solution is not None
    code, out, err = run(capsys, "attack", "--level", "2", "--solution")
    assert code == 0 and err == "" and "The solution you asked for: " + lv.solution.answer[:40] in out
    assert "Why this channel is open" in out and "progress board notes" in out
    assert set(solutions_shown()) == {lv.item_id} and engine.jobs == []
    assert load_progress().level(lv.item_id).attempts == 0  # asking is not an attempt
    code, out, _ = run(capsys, "attack", "--level", "naive-gist", "--solution", "--json")
    assert code == 0 and json.loads(out) == {
        "level": 2, "id": lv.id, "title": lv.title, "recorded": True,
        "solution": {"answer": lv.solution.answer, "channel": lv.solution.channel, "also": list(lv.solution.also)}}
    # a miss says how to ask; the uncapturable level has no solution to show, and says why
    code, out, _ = run(capsys, "attack", "--level", "2", _attack_file(tmp_path, "print('hi')"))
    assert code == 1 and "sandbox-lab attack --level 2 --solution" in out
    last = next(x for x in load_levels() if x.solution is None)
    code, out, err = run(capsys, "attack", "--level", str(last.number), "--solution")
    assert code == 2 and "has no solution to show" in err and set(solutions_shown()) == {lv.item_id}


def test_attack_solution_still_shows_when_the_record_cannot_be_written(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                      engine: _FakeEngine) -> None:
    from grader.course.reveals import reveals_path

    reveals_path().write_text("not json")  # a broken record: said, never silently replaced
    code, out, err = run(capsys, "attack", "--level", "1", "--solution", "--json")
    assert code == 0 and json.loads(out)["recorded"] is False and "not recorded" in err
    assert reveals_path().read_text() == "not json"


@pytest.mark.parametrize("argv,fragment", [
    (["attack", "--level", "99", "ATTACK"], "unknown level 99; the levels are 1 to"),
    (["attack", "--level", "99", "--solution"], "unknown level 99; the levels are 1 to"),
    (["attack", "--solution"], "--solution needs the level: --level N"),
    (["attack", "--level", "1", "ATTACK", "--solution"], "--solution runs nothing"),
    (["attack", "--list", "--solution"], "--list takes no level, no ATTACK.py and no --solution"),
    (["attack", "--level", "1", "MISSING"], "no such file"),
    (["attack", "--level", "1", "DIR"], "is a directory"),
    (["attack", "--level", "1", "BINARY"], "is not UTF-8 text"),
    (["attack", "ATTACK"], "attack needs --level N and an ATTACK.py file"),
    (["attack", "--level", "1"], "attack needs --level N and an ATTACK.py file"),
    (["attack", "--list", "--level", "1"], "--list takes no level"),
])
def test_attack_invalid_input_exits_2_with_a_clear_message(capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: _FakeEngine,
                                                           argv: list[str], fragment: str) -> None:
    (tmp_path / "bin.py").write_bytes(b"\xff\xfe\x00")
    files = {"ATTACK": _attack_file(tmp_path, "print(1)"), "MISSING": str(tmp_path / "nope.py"), "DIR": str(tmp_path), "BINARY": str(tmp_path / "bin.py")}
    code, out, err = run(capsys, *[files.get(a, a) for a in argv])
    assert code == 2 and fragment in err and engine.jobs == []
    code, out, _ = run(capsys, *[files.get(a, a) for a in argv], "--json")
    assert code == 2 and fragment in json.loads(out)["error"]


def test_an_attack_over_the_limit_or_a_pipe_is_refused_without_reading_it_all(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: _FakeEngine
) -> None:
    big = tmp_path / "big.py"
    big.write_text("#" * (256 * 1024 + 1))
    code, _, err = run(capsys, "attack", "--level", "1", str(big))
    assert code == 2 and "is larger than 256 KiB; an attack is a short script" in err and engine.jobs == []
    with endless_pipe(tmp_path / "attack.py", b"#") as pipe:  # a FIFO, as /dev/zero: it was read whole before
        code, _, err = run(capsys, "attack", "--level", "1", str(pipe.path))
        taken = pipe.taken()
    assert code == 2 and "is a pipe or a device, not a Python file" in err and taken < OFFERED, (err, taken)


def test_attack_with_the_static_backend_says_it_cannot_predict_and_points_to_docker(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: _FakeEngine
) -> None:
    attack = _attack_file(tmp_path, "# SEND_FLAG")
    code, _, err = run(capsys, "attack", "--level", "1", attack, "--backend", "static")
    assert code == 3 and "attacks cannot be predicted" in err and "--backend docker" in err
    monkeypatch.setenv(backends.BACKEND_ENV, "static")  # the environment picks the backend too
    assert run(capsys, "attack", "--level", "1", attack)[0] == 3
    monkeypatch.setenv(backends.BACKEND_ENV, "podman")
    assert run(capsys, "attack", "--level", "1", attack)[0] == 2
    assert engine.jobs == []


def test_attack_without_an_engine_exits_3(capsys: pytest.CaptureFixture[str], tmp_path: Path, no_engine: None) -> None:
    code, _, err = run(capsys, "attack", "--level", "1", _attack_file(tmp_path, "print(1)"), "--backend", "docker")
    assert code == 3 and "No Docker engine answers" in err
    code, _, err = run(capsys, "attack", "--level", "1", _attack_file(tmp_path, "print(1)"))  # auto falls back to static: said plainly
    assert code == 3 and "attacks cannot be predicted" in err


def test_attack_output_cannot_drive_the_terminal(capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: _FakeEngine,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.core.execution import Execution

    real = engine.execute
    monkeypatch.setattr(engine, "execute", lambda plan, job: Execution(**{**real(plan, job).__dict__, "output": "\x1b[2Jgone\x07"}))
    out = run(capsys, "attack", "--level", "1", _attack_file(tmp_path, "x"))[1]
    assert "\x1b" not in out and "\\x1b[2Jgone\\x07" in out


def test_one_shot_commands_share_the_machines_internet_and_batches_do_not(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """probe and grade ask for the shared simulated internet (a terminal's next run reuses it); grade-batch,
    a long-lived process, keeps its own and leaves nothing running after it."""
    asked: list[tuple[str, bool]] = []
    current = [""]
    monkeypatch.setattr(backends, "_docker", lambda progress, shared=False, runtime=None: asked.append((current[0], shared)) or StaticBackend())
    policy = REPO / "solutions" / "scope-secure-sandbox.json"
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.json").write_text(policy.read_text())
    for argv in (("probe", str(policy)), ("grade", "--task", "scope-secure-sandbox", str(policy)),
                 ("grade-batch", "--task", "scope-secure-sandbox", str(folder), "--out", str(tmp_path / "out"))):
        current[0] = argv[0]
        run(capsys, *argv, "--backend", "docker")
    assert asked == [("probe", True), ("grade", True), ("grade-batch", False)]


# --- class-keys (each learner's key for graded checks in a class) ---------------------------------

SECRET = "0123456789abcdef" * 4


def _secret_file(tmp_path: Path, text: str = SECRET + "\n", mode: int = 0o600) -> str:
    f = tmp_path / "class-secret"
    f.write_text(text)
    f.chmod(mode)
    return str(f)


def test_class_keys_are_the_keys_autograde_derives_and_never_show_the_secret(capsys: pytest.CaptureFixture[str],
                                                                             tmp_path: Path) -> None:
    from grader.course.first_answer import CLASS_KEY_ENV, first_answer_record, judge_class_answer, learner_key

    roster = tmp_path / "students.txt"
    roster.write_text("bob\n\n  carol  \nada\n")
    code, out, err = run(capsys, "class-keys", "--secret-file", _secret_file(tmp_path), "ada", "--students", str(roster))
    assert code == 0 and err == "" and SECRET not in out
    lines = [line.split("\t") for line in out.splitlines()]
    assert lines == [[s, learner_key(SECRET, s)] for s in ("ada", "bob", "carol")]  # each once, in the order given
    code, out, _ = run(capsys, "class-keys", "--secret-file", _secret_file(tmp_path), "ada", "bob", "--json")
    data = json.loads(out)
    assert code == 0 and data == {"env": CLASS_KEY_ENV, "keys": [{"student": s, "key": learner_key(SECRET, s)} for s in ("ada", "bob")]}
    # the key printed for ada signs what autograde, given the secret, accepts for ada and for nobody else
    record = first_answer_record("q", True, key=data["keys"][0]["key"], ledger=tmp_path / "first-answers.jsonl")
    assert judge_class_answer("q", [], [record], "", learner_key(SECRET, "ada")).solved is True
    assert judge_class_answer("q", [], [record], "", learner_key(SECRET, "bob")).solved is None


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644])
def test_class_keys_refuse_a_secret_file_open_to_others(capsys: pytest.CaptureFixture[str], tmp_path: Path, mode: int) -> None:
    secret = _secret_file(tmp_path, mode=mode)
    code, out, err = run(capsys, "class-keys", "--secret-file", secret, "ada")
    assert code == 2 and out == "" and f"mode {mode:04o}" in err and f"chmod 600 {secret}" in err and SECRET not in err
    code, out, _ = run(capsys, "class-keys", "--secret-file", secret, "ada", "--json")
    assert code == 2 and "is open to others" in json.loads(out)["error"] and SECRET not in out


@pytest.mark.parametrize("setup, fragment", [
    (lambda d: str(d / "none"), "no such file. Make the class secret with"),
    (lambda d: str(d), "is not a regular file"),
    (lambda d: _secret_file(d, "\n"), "the class secret is empty"),
    (lambda d: _secret_file(d, "short\n"), "the class secret is too short"),
    (lambda d: _secret_file(d, SECRET + "\n" + SECRET + "\n"), "holds more than one line"),
    (lambda d: _secret_file(d, "x" * 5000), "is larger than 4 KiB"),
])
def test_class_keys_say_what_is_wrong_with_the_secret_file(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                           setup: Any, fragment: str) -> None:
    code, out, err = run(capsys, "class-keys", "--secret-file", setup(tmp_path), "ada")
    assert code == 2 and out == "" and fragment in err and SECRET not in err


@pytest.mark.parametrize("argv, fragment", [
    ([], "class-keys needs the student ids"),
    (["ada\tbob"], "is not a student id"),
    (["--students", "MISSING"], "no such file"),
])
def test_class_keys_need_student_ids(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], fragment: str) -> None:
    argv = [str(tmp_path / "nope.txt") if a == "MISSING" else a for a in argv]
    code, out, err = run(capsys, "class-keys", "--secret-file", _secret_file(tmp_path), *argv)
    assert code == 2 and out == "" and fragment in err
