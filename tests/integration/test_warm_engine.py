"""The warm engine (grader/cli/engine.py): a command handed to it prints what it prints run here, and every way
the engine can fail ends in the caller's own run or a clear error, never a verdict of another policy.

Each test gets a runs root of its own, so an engine and a hub of its own; the commands are real
``python -m grader`` processes, as a terminal runs them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import docker
import pytest

from grader.backends.docker.golines import runner_ready
from grader.backends.docker.hub import stop_keepers
from grader.backends.docker.lease import IDLE_ENV, process_alive
from grader.backends.docker.simnet import LABEL_PID, LABEL_ROLE
from grader.cli.engine import stop_engines
from holds import Hold

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
PRACTICE = {"filesystem": {"denyRead": ["~", "/etc/secrets", "/project"], "allowRead": ["/project/src"],
                           "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}


@pytest.fixture()
def root(monkeypatch: pytest.MonkeyPatch, docker_client: Any) -> Iterator[Path]:
    runs = Path(tempfile.mkdtemp(prefix="sl-eng-", dir="/tmp"))  # short: a Unix socket's path has 108 bytes
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(runs))
    monkeypatch.setenv(IDLE_ENV, "60")
    monkeypatch.setenv("SANDBOX_LAB_ENGINE", "on")
    yield runs
    stop_engines()
    stop_keepers()
    from grader.backends.runs import cleanup

    cleanup()  # what a killed engine left: its pid is gone
    shutil.rmtree(runs, ignore_errors=True)
    Path(f"{runs}.swept").unlink(missing_ok=True)  # cleanup's stamp beside the root it swept


def _policy(tmp: Path, name: str, raw: dict[str, Any]) -> Path:
    f = tmp / f"{name}.json"
    f.write_text(json.dumps(raw))
    return f


def _cli(*argv: str, engine: str = "on") -> "subprocess.Popen[str]":
    env = {**os.environ, "SANDBOX_LAB_ENGINE": engine}
    return subprocess.Popen([sys.executable, "-m", "grader", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, env=env)


def _done(*argv: str, engine: str = "on") -> tuple[int, str, str]:
    proc = _cli(*argv, engine=engine)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def _start() -> int:
    code, out, err = _done("engine", "start", "--json")
    assert code == 0, err
    pid = int(json.loads(out)["pid"])
    assert process_alive(pid)
    return pid


def _verdicts(out: str) -> dict[str, str]:
    return {p["id"]: p["outcome"] for p in json.loads(out)["probes"]}


def test_a_handed_command_prints_what_it_prints_here(root: Path, tmp_path: Path) -> None:
    pid = _start()
    naive, practice = _policy(tmp_path, "naive", NAIVE), _policy(tmp_path, "practice", PRACTICE)
    broken = tmp_path / "broken.json"
    broken.write_text('{"filesystem": {"allowWrite": "/project/out"}}')
    for argv in (["probe", str(naive), "--backend", "docker", "--json"],
                 ["probe", str(practice), "--backend", "docker", "--json"]):
        here, there = _done(*argv, engine="off"), _done(*argv)
        assert here[0] == there[0] == 0, (here[2], there[2])
        assert _verdicts(there[1]) == _verdicts(here[1])
    # a policy's errors, exit codes and the grade's text are the same, byte for byte
    for argv in (["check", str(broken)], ["probe", str(broken), "--backend", "docker"],
                 ["grade", str(practice), "--task", "scope-secure-sandbox", "--backend", "static"],
                 ["check", str(tmp_path / "missing.json")]):
        assert _done(*argv) == _done(*argv, engine="off"), argv
    assert process_alive(pid), "the engine served them all"
    code, out, _ = _done("engine", "status", "--json")
    assert [e["pid"] for e in json.loads(out)["engines"]] == [pid]


def test_two_policies_in_a_row_each_get_their_own_run(root: Path, tmp_path: Path) -> None:
    _start()
    naive, practice = _policy(tmp_path, "naive", NAIVE), _policy(tmp_path, "practice", PRACTICE)
    first = _verdicts(_done("probe", str(naive), "--backend", "docker", "--json")[1])
    second = _verdicts(_done("probe", str(practice), "--backend", "docker", "--json")[1])
    assert first["read-ssh-key"] == "succeeded" and second["read-ssh-key"] == "blocked"
    assert first["exfil-secret"] != second["exfil-secret"] or first != second


def test_an_engine_killed_mid_run_leaves_the_command_to_run_here(root: Path, tmp_path: Path, docker_client: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    naive = _policy(tmp_path, "naive", NAIVE)
    # the verdicts to expect, before the engine starts: a slow run here must not eat its idle period (CI saw the
    # engine gone, idle, when the kill came)
    expected = _verdicts(_done("probe", str(naive), "--backend", "docker", "--json", engine="off")[1])
    # the engine's run is held while it waits on its sandbox (tests/holdhook), so the kill always lands mid-run:
    # watching for its containers raced a quick run. The command's own run here is not held (one run only is).
    hold = Hold(tmp_path / "hold")
    hold.arm()
    for name, value in hold.env(os.environ.get("PYTHONPATH", "")).items():
        monkeypatch.setenv(name, value)
    pid = _start()
    proc = _cli("probe", str(naive), "--backend", "docker", "--json")
    held = hold.wait_held(alive=lambda: proc.poll() is None, said=lambda: "the engine's run was never held")
    assert held == pid, "the engine holds the run"
    assert process_alive(pid), "the engine ended before its run started: nothing to kill mid-run"
    os.kill(pid, signal.SIGKILL)
    hold.release()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "the warm engine stopped before the command finished; running it here instead" in err
    assert _verdicts(out) == expected
    assert not process_alive(pid)


def test_an_engine_declines_once_the_code_changed_and_exits(root: Path, tmp_path: Path) -> None:
    pid = _start()
    practice = _policy(tmp_path, "practice", PRACTICE)
    touched = REPO / "grader" / "cli" / "client.py"
    stat = touched.stat()
    os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    try:
        code, out, err = _done("probe", str(practice), "--backend", "docker", "--json", engine="on")
    finally:
        os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert code == 0, err
    assert _verdicts(out)["read-ssh-key"] == "blocked"
    deadline = time.monotonic() + 90  # it closes its backend first: its internet and proxies go, on a busy machine
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(pid), "a stale engine exits"


def _held(client: Any, pid: int) -> list[Any]:
    """The engine's probe runners waiting for their go: running, and silent but for their ``ready`` line (a fired
    one prints its records at once, and is removed once its end is read, without waiting for its exit). Not the
    next sandboxed session a naive policy's held run holds ready beside its own (``nextready``: a job's sandbox)."""
    running = client.api.containers(filters={"label": [f"{LABEL_PID}={pid}", f"{LABEL_ROLE}=sandbox"], "status": "running"})

    def silent(c: Any) -> bool:
        try:
            out = client.api.logs(c["Id"], stdout=True, stderr=False)
        except docker.errors.APIError:  # gone or being removed since the listing (404, 409): fired
            return False
        return all(runner_ready(line) for line in out.splitlines())

    return [c for c in running if "import probe_runner" in str(c.get("Command", "")) and silent(c)]


def test_a_rerun_and_a_saved_edit_fire_only_what_was_prepared_for_them(root: Path, tmp_path: Path,
                                                                      docker_client: Any) -> None:
    pid = _start()
    naive, practice = _policy(tmp_path, "naive", NAIVE), _policy(tmp_path, "practice", PRACTICE)
    expected = {name: _verdicts(_done("probe", str(f), "--backend", "docker", "--json", engine="off")[1])
                for name, f in (("naive", naive), ("practice", practice))}
    edited = tmp_path / "edited.json"

    def probe() -> dict[str, str]:
        code, out, err = _done("probe", str(edited), "--backend", "docker", "--json")
        assert code == 0, err
        return _verdicts(out)

    edited.write_text(json.dumps(NAIVE))
    assert probe() == expected["naive"]
    deadline = time.monotonic() + 60
    while not _held(docker_client, pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _held(docker_client, pid), "the rerun of the file just probed is prepared"
    assert probe() == expected["naive"]  # the rerun
    edited.write_text(json.dumps(PRACTICE))
    time.sleep(1.5)  # saved, then the command typed: the engine has prepared the new text
    assert probe() == expected["practice"]
    # the same size and the same last-change time: the engine cannot see the edit, and what it holds for the
    # practice text must still not be fired for the naive one (the command's plan decides, never the file's stamp)
    deadline = time.monotonic() + 60
    while not _held(docker_client, pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    before = edited.stat()
    text = json.dumps(NAIVE)
    edited.write_text(text + " " * (before.st_size - len(text)))
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert edited.stat().st_size == before.st_size
    assert probe() == expected["naive"]
    edited.write_text('{"filesystem": {"allowWrite": "/project/out"}}')
    time.sleep(1.0)
    assert _done("probe", str(edited), "--backend", "docker") == _done("probe", str(edited), "--backend", "docker",
                                                                        engine="off")


def _until_held(client: Any, pid: int, count: int) -> set[str]:
    deadline = time.monotonic() + 60
    while len(_held(client, pid)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    held = {c["Id"] for c in _held(client, pid)}
    assert len(held) == count, f"{len(held)} sandboxes held, not {count}"
    return held


def test_a_new_file_saved_beside_a_probed_one_is_prepared_and_fired(root: Path, tmp_path: Path,
                                                                   docker_client: Any) -> None:
    pid = _start()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    expected = _verdicts(_done("probe", str(_policy(elsewhere, "practice", PRACTICE)), "--backend", "docker", "--json",
                               engine="off")[1])
    folder = tmp_path / "policies"
    folder.mkdir()
    code, out, err = _done("probe", str(_policy(folder, "naive", NAIVE)), "--backend", "docker", "--json")
    assert code == 0, err
    naive_held = _until_held(docker_client, pid, 1)  # its rerun
    (folder / "mine.json").write_text(json.dumps(PRACTICE))  # cp naive.json mine.json, edited, saved
    mine_held = _until_held(docker_client, pid, 2) - naive_held
    code, out, err = _done("probe", str(folder / "mine.json"), "--backend", "docker", "--json")
    assert code == 0, err
    assert _verdicts(out) == expected and expected["read-ssh-key"] == "blocked"
    running = {c["Id"] for c in _held(docker_client, pid)}
    assert not mine_held & running, "the sandbox prepared for mine.json was fired"
    assert naive_held <= running, "naive.json's rerun is still held, never fired for another policy"


def test_stop_ends_the_engine_and_what_it_kept(root: Path, tmp_path: Path, docker_client: Any) -> None:
    pid = _start()
    assert _done("probe", str(_policy(tmp_path, "practice", PRACTICE)), "--backend", "docker")[0] == 0
    deadline = time.monotonic() + 60
    while not _held(docker_client, pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _held(docker_client, pid), "a run held ready for the rerun"
    code, out, _ = _done("engine", "stop")
    assert code == 0 and f"stopped engine {pid}" in out
    assert not process_alive(pid)
    assert not list(root.glob("sl-engine-*.sock")) and not list(root.glob("sl-engine-*.pid"))
    assert docker_client.api.containers(all=True, filters={"label": f"{LABEL_PID}={pid}"}) == []  # held runs too


def test_a_docker_command_here_starts_the_engine_for_the_next(root: Path, tmp_path: Path) -> None:
    practice = _policy(tmp_path, "practice", PRACTICE)
    assert _done("probe", str(practice), "--backend", "docker")[0] == 0
    deadline = time.monotonic() + 60
    while not list(root.glob("sl-engine-*.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    code, out, _ = _done("engine", "status", "--json")
    assert len(json.loads(out)["engines"]) == 1
    # a static command does not start one
    stop_engines()
    assert _done("check", str(practice))[0] == 0
    time.sleep(1)
    assert not list(root.glob("sl-engine-*.pid"))


def test_the_engine_runs_on_the_machines_hub_and_keeps_no_internet_of_its_own(
        root: Path, tmp_path: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One simulated internet and one pool of proxies for a terminal: the engine adopts the hub a one-shot command
    adopts (it holds a lease there) and starts no internet of its own. An engine on a backend of its own would
    label an ``internet`` container with its pid (the second assertion) and hold no lease (the first). The
    idle period is left unset, as on a learner's machine: set, it would put every backend on the hub."""
    monkeypatch.delenv(IDLE_ENV)
    pid = _start()
    naive = _policy(tmp_path, "naive", NAIVE)
    first = _verdicts(_done("probe", str(naive), "--backend", "docker", "--json")[1])
    again = _verdicts(_done("probe", str(naive), "--backend", "docker", "--json")[1])  # the held run, fired
    assert first == again and first["read-ssh-key"] == "succeeded"
    leases = [p.stem for p in root.glob("sl-hub-*/leases/*.json")]
    assert str(pid) in leases, f"the engine holds no lease on the hub (leases: {leases})"
    own = docker_client.api.containers(all=True, filters={"label": [f"{LABEL_PID}={pid}", f"{LABEL_ROLE}=internet"]})
    assert own == [], f"the engine started an internet of its own: {[c['Names'] for c in own]}"
