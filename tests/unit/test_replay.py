"""The Docker replay's decisions that need no Docker: whether a run plays the next session, and what changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader import load_policy
from grader.backends import replay
from grader.backends.runs import RunDir
from grader.evidence import Evidence, Markers, sha256
from grader.execution import Job
from grader.next_session import SETTINGS
from grader.plan import build_plan


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

    class Run:
        client = _NoEngine()
        run_id, token, labels = "sl-test", "tok", {}
        dir = RunDir(tmp_path)
        job = None
        containers: list[Any] = []
        networks: list[Any] = []

    Run.plan = plan  # type: ignore[attr-defined]
    same = {f.path: f.content.encode() for f in plan.world.files}
    ns = replay.play(Run(), _ev(same, same), images=("s", "v"), leftovers=_NoEngine(), harden=lambda h: {},
                     execute=lambda p, j: (_ for _ in ()).throw(AssertionError("no next sandbox")))
    assert ns.played == () and ns.skipped.startswith("nothing the next session runs was changed")
