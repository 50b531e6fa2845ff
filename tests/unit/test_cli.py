"""The ``sandbox-lab`` command line, run in-process (and once as a subprocess): output shapes and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import grader
from grader import backends, cli
from grader.backends.static import StaticBackend
from grader.errors import DockerUnavailable, InfrastructureError
from grader.outcomes import RunResult
from grader.plan import RunPlan

REPO = Path(__file__).parents[2]
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

    def refuse(progress: Any) -> Any:
        raise DockerUnavailable("connection refused")

    monkeypatch.setattr(backends, "_docker", refuse)


# --- check ----------------------------------------------------------------------------------


def test_check_valid_prints_normal_form_warnings_and_findings(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", NAIVE)
    assert code == 0 and err == ""
    assert f"{NAIVE} is a valid policy" in out
    assert '"allowWrite": [\n      "/home/user"\n    ]' in out  # normalized: the trailing slash is gone
    # 2 of Sandbox Lab's own, then 2 where the real srt differs (shell start-up file, its own settings)
    assert "4 warnings:" in out and "/network/allowedDomains/0" in out
    assert out.count("/filesystem/allowWrite/0: [srt 0.0.78] ") == 2
    assert "only in the directory srt starts in" in out and "does not protect its own settings file" in out
    assert out.index("Attacks") < out.index("Jobs")
    assert "10 of 16 attacks succeeded; 1 of 5 jobs work" in out


def test_check_invalid_reports_every_problem_on_stderr_with_exit_2(capsys: pytest.CaptureFixture[str], bad_policy: str) -> None:
    code, out, err = run(capsys, "check", bad_policy)
    assert code == 2 and out == ""
    assert f"{bad_policy} is not a valid policy (3 problems)" in err
    assert '/filesystem/allowWrites: unknown key' in err and 'Did you mean "allowWrite"?' in err
    assert "/filesystem/allowRead/0: relative path" in err
    assert '/network/allowedDomains/0: "*" allows every host' in err


def test_check_json_valid_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", SECURE, "--json")
    data = json.loads(out)
    assert code == 0
    assert set(data) == {"valid", "source", "policy", "warnings", "findings", "summary", "srt_differences"}
    assert data["valid"] is True
    assert data["policy"]["network"]["allowedDomains"] == ["registry.npmjs.org"]
    assert data["warnings"] == []
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
    assert all(set(d) == {"pointer", "message", "cause"} and d["message"].startswith("[srt 0.0.78] ") for d in srt)
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
    assert data["scope"]["readable"] == ["/project/src/main.py"]
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
    assert "10 of 16 attacks succeeded; 1 of 5 jobs work" in out


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
    monkeypatch.setattr(backends, "_docker", lambda progress: pytest.fail("docker must not be tried"))
    assert json.loads(run(capsys, "probe", PRACTICE, "--json")[1])["backend"] == "static"
    monkeypatch.setenv(backends.BACKEND_ENV, "podman")
    code, _, err = run(capsys, "probe", PRACTICE)
    assert code == 2 and "SANDBOX_LAB_BACKEND" in err and "unknown backend" in err


class _Failing:
    name = "docker"

    def run(self, plan: RunPlan) -> RunResult:
        raise InfrastructureError("the internet service stopped during the run\nsecond line")


def test_a_failed_run_is_a_one_line_error_exit_3(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "get", lambda name, progress=None: _Failing())
    code, out, err = run(capsys, "probe", PRACTICE, "--backend", "docker")
    assert code == 3 and out == ""
    assert err == "sandbox-lab: the internet service stopped during the run\n"


def test_ctrl_c_is_exit_130_with_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    class Interrupted(StaticBackend):
        def run(self, plan: RunPlan) -> RunResult:
            raise KeyboardInterrupt

    monkeypatch.setattr(backends, "get", lambda name, progress=None: Interrupted())
    code, _, err = run(capsys, "probe", PRACTICE, "--backend", "static")
    assert code == 130 and err == "sandbox-lab: interrupted\n"


def test_an_internal_error_is_reported_without_a_traceback(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("unexpected")

    monkeypatch.setattr(cli, "predict", boom)
    code, _, err = run(capsys, "check", NAIVE)
    assert code == 1
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
    assert any("allow-only reads" in line for line in lines)


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
    assert sorted(names) == sorted(set(names)) == ["check", "cleanup", "export", "probe", "schema", "setup"]


# --- as a real process ----------------------------------------------------------------------


def test_python_dash_m_grader_check_as_a_subprocess(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "grader", "check", "examples/naive.json"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "examples/naive.json is a valid policy" in ok.stdout
    bad = tmp_path / "bad.json"
    bad.write_text('{"network": {"allowedDomains": ["*"]}}')
    failed = subprocess.run([sys.executable, "-m", "grader", "check", str(bad)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 2
    assert "Traceback" not in failed.stderr and '"*" allows every host' in failed.stderr
