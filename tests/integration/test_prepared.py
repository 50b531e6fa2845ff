"""A prepared run (issue 40): ready up to its probes, fired once by its go, never used for another plan or stale,
and removed whole when retired, by its timer, by ``close``, or by ``cleanup`` after its grader was killed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from grader import load_policy
from grader.backends.docker.prepared import Prepared, PreparedUsed
from grader.backends.docker.proxies import ProxyPool
from grader.core.plan import build_plan

pytestmark = pytest.mark.docker

SECURE = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}
PRACTICE = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}
NAIVE = {"filesystem": {"allowWrite": ["/home/user"]}, "network": {"allowedDomains": ["*.github.com"]}}
LABEL_RUN = "org.sandbox-lab.run"


def _outcomes(result: Any) -> dict[str, str]:
    return {p.id: p.outcome for p in result.probes}


def _containers(client: Any, run_id: str) -> list[Any]:
    return list(client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}))


def _sandbox_state(client: Any, run_id: str) -> str:
    got = [c for c in _containers(client, run_id) if c["Names"][0].endswith("-sandbox")]
    return str(got[0]["State"]) if got else "gone"


def test_go_returns_what_run_returns_and_only_once(docker_backend: Any, docker_client: Any, no_leftovers: None) -> None:
    plan = build_plan(load_policy(SECURE))
    prepared = docker_backend.prepare(plan)
    assert prepared.run_id is not None and prepared.matches(plan)
    # the sandbox is up, its runner waiting: nothing fired before the go
    assert _sandbox_state(docker_client, prepared.run_id) == "running"
    time.sleep(3.0)  # held a while: the proxy's heartbeats and self-checks pile up in the run's window meanwhile
    assert _sandbox_state(docker_client, prepared.run_id) == "running"
    run_id = prepared.run_id
    result = prepared.go()
    assert result.run_id == run_id  # fired the very sandbox prepared
    assert _outcomes(result) == _outcomes(docker_backend.run(plan))
    assert all(p.outcome != "error" for p in result.probes)
    with pytest.raises(PreparedUsed):
        prepared.go()


def test_a_prepared_run_holds_its_own_plan(docker_backend: Any, no_leftovers: None) -> None:
    secure, practice = build_plan(load_policy(SECURE)), build_plan(load_policy(PRACTICE))
    prepared = docker_backend.prepare(secure)
    try:
        assert prepared.matches(secure) and not prepared.matches(practice)
        assert prepared.plan is secure
    finally:
        prepared.close()
    with pytest.raises(PreparedUsed):  # closed: never fired afterwards
        prepared.go()


def test_closing_removes_everything(docker_backend: Any, docker_client: Any, no_leftovers: None) -> None:
    prepared = docker_backend.prepare(build_plan(load_policy(PRACTICE)))
    run_id = prepared.run_id
    assert run_id is not None and _containers(docker_client, run_id)
    prepared.close()
    docker_backend.drain()
    assert not _containers(docker_client, run_id)


def test_an_idle_prepared_run_is_retired_and_go_runs_afresh(docker_backend: Any, docker_client: Any,
                                                            no_leftovers: None) -> None:
    plan = build_plan(load_policy(PRACTICE))
    prepared = docker_backend.prepare(plan, idle_s=0.5)
    run_id = prepared.run_id
    assert run_id is not None
    deadline = time.monotonic() + 30
    while prepared.state == "ready" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert prepared.state == "expired"
    deadline = time.monotonic() + 60  # its timer retires it, then removes it: removal may still be under way
    while _containers(docker_client, run_id) and time.monotonic() < deadline:
        docker_backend.drain()
        time.sleep(0.1)
    assert not _containers(docker_client, run_id)
    result = prepared.go()  # retired by its timer, not by its holder: the go runs cold, on a new sandbox
    assert result.run_id != run_id
    assert _outcomes(result) == _outcomes(docker_backend.run(plan))


def test_a_rebuilt_image_retires_the_prepared_run(docker_backend: Any, docker_client: Any,
                                                  monkeypatch: pytest.MonkeyPatch, no_leftovers: None) -> None:
    plan = build_plan(load_policy(PRACTICE))
    prepared = docker_backend.prepare(plan)
    run_id = prepared.run_id
    assert run_id is not None
    # `sandbox-lab setup` rebuilt the sandbox image: its tag now names another image id
    ids = docker_backend._image_ids()
    monkeypatch.setattr(docker_backend, "_image_ids", lambda: ("sha256:rebuilt", ids[1]))
    result = prepared.go()
    assert result.run_id != run_id  # a fresh sandbox ran it, not the stale one
    docker_backend.drain()
    assert not _containers(docker_client, run_id)
    assert all(p.outcome != "error" for p in result.probes)


def test_a_stopped_prepared_sandbox_is_never_judged(docker_backend: Any, docker_client: Any, no_leftovers: None) -> None:
    plan = build_plan(load_policy(PRACTICE))
    prepared = docker_backend.prepare(plan)
    run_id = prepared.run_id
    assert run_id is not None
    docker_client.api.kill(f"{run_id}-sandbox")  # e.g. the engine's OOM killer while it waited
    result = prepared.go()
    assert result.run_id != run_id
    assert all(p.outcome != "error" for p in result.probes)


def test_backend_close_retires_what_it_holds(docker_client: Any) -> None:
    from grader.backends.docker.backend import DockerBackend
    from grader.backends.docker.images import ensure_images
    from grader.backends.docker.engine import DockerEngine

    backend = DockerBackend(DockerEngine(docker_client), ensure_images(DockerEngine(docker_client), lambda s: None))
    prepared: Prepared = backend.prepare(build_plan(load_policy(PRACTICE)))
    run_id = prepared.run_id
    assert run_id is not None
    backend.close()
    assert prepared.state == "closed"
    assert not _containers(docker_client, run_id)


def test_cleanup_removes_what_a_killed_grader_held_prepared(docker_client: Any) -> None:
    from grader.backends.docker.backend import cleanup, runs_root
    from grader.backends.docker.engine import DockerEngine

    script = (
        "from grader import load_policy\n"
        "from grader.core.plan import build_plan\n"
        "from grader.backends.docker.backend import DockerBackend\n"
        "b = DockerBackend.from_env()\n"
        f"p = b.prepare(build_plan(load_policy({SECURE!r})))\n"
        "print(p.run_id, flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        run_id = proc.stdout.readline().strip()
        assert run_id.startswith("sl-"), run_id
        assert _sandbox_state(docker_client, run_id) == "running"
    finally:
        proc.send_signal(signal.SIGKILL)  # no chance to retire anything
        proc.wait()
        proc.stdout.close()
    pid_label = {"label": f"org.sandbox-lab.pid={proc.pid}"}
    assert docker_client.api.containers(all=True, filters=pid_label), "the kill should have left the prepared run"
    cleanup(DockerEngine(docker_client))
    assert not _containers(docker_client, run_id)
    assert not docker_client.api.containers(all=True, filters=pid_label)
    assert not docker_client.api.networks(filters=pid_label)
    root = runs_root()
    for d in root.iterdir() if root.is_dir() else []:
        owner = json.loads((d / "owner.json").read_text()) if (d / "owner.json").exists() else {}
        assert owner.get("pid") != proc.pid


def test_the_editors_prestart_fires_its_prepared_sandbox_on_docker(docker_backend: Any, no_leftovers: None) -> None:
    from grader.course.prestart import Prestart, lesson_plan

    policy = load_policy(SECURE)
    plan = lesson_plan(policy)
    pre = Prestart(lambda: docker_backend, settle_s=0.0)
    try:
        pre.offer(policy)
        deadline = time.monotonic() + 60
        while pre.held is None and time.monotonic() < deadline:
            time.sleep(0.05)
        held = pre.held
        assert isinstance(held, Prepared) and held.run_id is not None
        run_id = held.run_id
        result = pre.run(plan)
        assert result.run_id == run_id and pre.held is None
        assert _outcomes(result) == _outcomes(docker_backend.run(plan))
        pre.offer(load_policy(PRACTICE))  # a new text: prepared, then retired by close below
        deadline = time.monotonic() + 60
        while pre.held is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pre.held is not None
    finally:
        pre.close()


def test_a_naive_policy_settles_with_its_next_session_ready_and_fires_as_a_cold_run(
        docker_backend: Any, no_leftovers: None) -> None:
    """A policy that lets the run rewrite its settings is prepared with its next session behind it (``nextready``):
    ``settled`` says when that is ready too (the bench's editor row waits for it), and the go judges as cold."""
    plan = build_plan(load_policy(NAIVE))
    prepared = docker_backend.prepare(plan)
    try:
        assert prepared.settled(60)
        ready = prepared._run.next_ready
        assert ready is not None and ready.ready, "the next session waits for its go"
        result = prepared.go()
    finally:
        prepared.close()
    assert all(p.outcome != "error" for p in result.probes), [(p.id, p.explanation) for p in result.probes]
    assert _outcomes(result) == _outcomes(docker_backend.run(plan))


def test_a_naive_run_held_with_its_replay_started_at_the_go_waits_as_one_sandbox_and_judges_as_a_cold_run(
        docker_backend: Any, no_leftovers: None) -> None:
    """``next_at_go`` (the warm engine's held reruns): while it waits, nothing of the replay exists (no next
    session, no replay internet); the go starts them during the probes, the replay takes the next session made
    then, and the verdicts are a cold run's. A build that ignored the flag would hold the next session (first
    assertion); one that never started it at the go would leave ``next_ready`` unset (second)."""
    plan = build_plan(load_policy(NAIVE))
    prepared = docker_backend.prepare(plan, next_at_go=True)
    try:
        assert prepared.settled(60)
        run = prepared._run
        assert run is not None and run.next_ready is None and run.ahead is None, "the held run is its sandbox alone"
        result = prepared.go()
    finally:
        prepared.close()
    assert run.next_ready is not None, "the go started the next session"
    assert all(p.outcome != "error" for p in result.probes), [(p.id, p.explanation) for p in result.probes]
    assert _outcomes(result) == _outcomes(docker_backend.run(plan))


def test_a_held_naive_run_made_whole_while_it_waits_fires_its_ready_next_session(
        docker_backend: Any, no_leftovers: None) -> None:
    """``complete`` (the warm engine, once no command was served for a while) starts the next session of a run
    held with ``next_at_go`` while it waits: ``settled`` then waits for it too, the go finds it ready, and the
    verdicts are a cold run's. A ``complete`` that did nothing would leave ``next_ready`` unset before the go."""
    plan = build_plan(load_policy(NAIVE))
    prepared = docker_backend.prepare(plan, next_at_go=True)
    try:
        prepared.complete()
        assert prepared.settled(60)
        run = prepared._run
        assert run is not None and run.next_ready is not None and run.next_ready.ready, "made whole before the go"
        ready = run.next_ready
        result = prepared.go()
        prepared.complete()  # used: nothing more is started
    finally:
        prepared.close()
    assert run.next_ready is ready, "the go started no second next session"
    assert all(p.outcome != "error" for p in result.probes), [(p.id, p.explanation) for p in result.probes]
    assert _outcomes(result) == _outcomes(docker_backend.run(plan))


def test_a_run_retired_unfired_gives_its_proxy_back_and_the_next_run_on_it_is_judged_alone(
        docker_backend: Any, docker_client: Any, no_leftovers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A held run retired before its go sent nothing through its proxy (the runner waits for the go), so the proxy
    is offered back to the pool, as after a clean run, serves the next run, and that run's verdicts are what it
    earns. A build that gave back nothing would remove the proxy unoffered (the first assertion); one that also
    gave back fired or stale runs' proxies is caught by test_shared_internet's unclean-run test and the go-path
    tests above. The pool's own checks still decide (it must answer a poke within 0.5 s): on a loaded machine a
    proxy offered back may be refused, and the test then retires another held run, three times at most."""
    offered: list[tuple[str, bool]] = []
    give_back = ProxyPool.give_back

    def spy(pool: ProxyPool, w: Any) -> bool:
        kept = give_back(pool, w)
        offered.append((w.container.id if w.container is not None else "", kept))
        return kept

    monkeypatch.setattr(ProxyPool, "give_back", spy)
    plan = build_plan(load_policy(SECURE))
    docker_backend.run(plan)  # the internet and the pool warm
    docker_backend.drain()
    for _ in range(3):
        offered.clear()
        prepared = docker_backend.prepare(plan)
        held = prepared._run
        assert held is not None and held.net is not None and held.net.taken is not None
        proxy = held.net.taken.proxy.container
        assert proxy is not None
        prepared.close()
        docker_backend.drain()
        assert (proxy.id, True) in offered or (proxy.id, False) in offered, "a proxy nothing passed through was removed"
        if (proxy.id, True) in offered:
            break
    else:
        pytest.fail(f"the pool refused every proxy offered back (its checks: running, a beat within 0.5 s of a poke): {offered}")
    assert proxy.name in docker_backend.sharing.standing(), "a proxy the pool kept is not standing"
    assert docker_client.api.inspect_container(proxy.id)["State"]["Running"]
    taken = []
    for _ in range(4):  # the pool hands out its oldest first: the given-back proxy is taken within its size
        again = docker_backend.prepare(plan)
        assert again._run is not None and again._run.net is not None and again._run.net.taken is not None
        got = again._run.net.taken.proxy.container
        if got is not None and got.id == proxy.id:
            result = again.go()
            break
        taken.append(again)
    else:
        pytest.fail("the given-back proxy never served another run")
    for other in taken:
        other.close()
    assert all(p.outcome != "error" for p in result.probes)
    assert _outcomes(result) == _outcomes(docker_backend.run(plan))
