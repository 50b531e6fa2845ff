"""The warm engine's client (grader/cli/client.py): which commands are handed, to whose engine, and when not."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from grader.backends.owners import runs_root
from grader.cli import client


@pytest.fixture()
def runs() -> Iterator[Path]:
    """A runs root with a short path: a Unix socket's path has 108 bytes, and pytest's tmp_path (under xdist's
    worker directories) can leave too few of them."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="sl-cl-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_the_runs_root_is_the_backends_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SANDBOX_LAB_RUNS", raising=False)
    assert Path(client._runs_root(dict(os.environ))) == runs_root()
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path))
    assert Path(client._runs_root(dict(os.environ))) == runs_root() == tmp_path


def test_the_key_follows_what_a_backend_is_made_under() -> None:
    base = {"PATH": "/usr/bin", "HOME": "/root", "TERM": "xterm"}
    key = client.engine_key(base)
    assert client.engine_key({**base, "TERM": "dumb", "COLUMNS": "80", "SANDBOX_LAB_TARGET": "claude-code"}) == key
    for changed in ({"DOCKER_HOST": "tcp://elsewhere:2375"}, {"SANDBOX_LAB_RUNS": "/tmp/other"},
                    {"SANDBOX_LAB_BACKEND": "static"}, {"HOME": "/home/other"}, {"PATH": "/opt/bin"}):
        assert client.engine_key({**base, **changed}) != key, changed


@pytest.mark.parametrize("argv, served", [
    (["probe", "p.json"], True),
    (["grade", "p.json", "--task", "x"], True),
    (["check", "p.json"], True),
    (["attack", "a.sh"], True),
    (["check", "-"], False),  # reads stdin: only this process has it
    (["probe", "--help"], False),
    (["grade-batch", "dir"], False),
    (["cleanup", "--all"], False),
    (["engine", "start"], False),
    ([], False),
])
def test_which_commands_are_handed(argv: list[str], served: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(client.ENGINE_ENV, "on")
    assert client.served(argv) is served
    monkeypatch.setenv(client.ENGINE_ENV, "off")
    assert client.served(argv) is False


def test_a_socket_path_too_long_for_a_unix_socket_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_RUNS", "/tmp/" + "x" * 120)
    assert client.socket_path() is None


def test_no_engine_means_the_command_runs_here(monkeypatch: pytest.MonkeyPatch, runs: Path) -> None:
    monkeypatch.setenv(client.ENGINE_ENV, "on")
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(runs))
    assert client.handed(["check", "p.json"]) is None
    path = client.socket_path()
    assert path is not None
    path.write_text("not a socket")  # a file where the socket should be: not an engine
    assert client.handed(["check", "p.json"]) is None


def _fake_engine(path: Path, replies: list[dict[str, object]], seen: list[dict[str, object]]) -> threading.Thread:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as lines:
            seen.append(json.loads(lines.readline()))
            for r in replies:
                conn.sendall(json.dumps(r).encode() + b"\n")
        listener.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_a_handed_command_prints_its_results_only_with_its_exit_code(
        monkeypatch: pytest.MonkeyPatch, runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(client.ENGINE_ENV, "on")
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(runs))
    path = client.socket_path()
    assert path is not None
    seen: list[dict[str, object]] = []
    t = _fake_engine(path, [{"err": "progress\n"}, {"out": "report\n"}, {"exit": 1}], seen)
    assert client.handed(["grade", "p.json", "--task", "t"]) == 1
    t.join(5)
    out, err = capsys.readouterr()
    assert (out, err) == ("report\n", "progress\n")
    assert seen[0]["argv"] == ["grade", "p.json", "--task", "t"]
    assert seen[0]["cwd"] == os.getcwd()
    assert seen[0]["env"] == dict(os.environ)  # type: ignore[comparison-overlap]


@pytest.mark.parametrize("replies", [
    [{"out": "half a report\n"}],  # the engine died mid-run: no exit code came
    [{"declined": "stale"}],  # the checkout's code changed under it
])
def test_an_engine_that_cannot_finish_leaves_the_command_to_run_here(
        replies: list[dict[str, object]], monkeypatch: pytest.MonkeyPatch, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(client.ENGINE_ENV, "on")
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(runs))
    path = client.socket_path()
    assert path is not None
    t = _fake_engine(path, replies, [])
    assert client.handed(["probe", "p.json"]) is None
    t.join(5)
    out, _ = capsys.readouterr()
    assert out == ""  # nothing of an unfinished run is printed: the local run prints the whole report


def test_the_console_script_runs_a_command_here_when_the_engine_is_off(tmp_path: Path) -> None:
    policy = tmp_path / "p.json"
    policy.write_text('{"filesystem": {"denyRead": ["~"]}}')
    env = {**os.environ, client.ENGINE_ENV: "off", "SANDBOX_LAB_RUNS": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, "-m", "grader", "check", str(policy)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout.lower()
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("sl-engine-*"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another user")
def test_a_socket_another_user_listens_on_is_never_talked_to(monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    runs = Path(tempfile.mkdtemp(prefix="sl-peer-", dir="/tmp"))
    runs.chmod(0o777)
    monkeypatch.setenv(client.ENGINE_ENV, "on")
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(runs))
    path = client.socket_path()
    assert path is not None
    heard = runs / "heard"
    listener = (f"import socket, pathlib\n"
                f"s = socket.socket(socket.AF_UNIX); s.bind({str(path)!r}); s.listen(1); print('up', flush=True)\n"
                f"c, _ = s.accept(); c.settimeout(3)\n"
                f"try:\n    data = c.recv(65536)\nexcept OSError:\n    data = b''\n"
                f"pathlib.Path({str(heard)!r}).write_bytes(data)\n")
    other = subprocess.Popen(["/usr/bin/python3", "-c", listener], user=1000, group=1000, extra_groups=[],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "up"
        assert client.handed(["probe", "p.json"]) is None  # runs here: uid 1000's socket is not this user's engine
        other.wait(10)
        assert heard.read_bytes() == b"", "the request (the caller's whole environment) went to another user"
    finally:
        other.kill()
        other.wait(10)
        if other.stdout is not None:
            other.stdout.close()
        import shutil

        shutil.rmtree(runs, ignore_errors=True)
