"""The run machinery every real backend shares (grader/backends/runs.py): run directories, owner records, cleanup, retries.

No Docker and no srt: directories live under a temporary ``SANDBOX_LAB_RUNS``,
and the cleanup registry is walked with stand-in cleaners.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Optional

import pytest

from grader import load_policy
from grader.backends import runs
from grader.backends.base import Backend, Closing
from grader.backends.static import StaticBackend
from grader.errors import InfrastructureError
from grader.outcomes import RunResult
from grader.plan import build_plan
from grader.scope import SCAN_IDS

BACKENDS = Path(runs.__file__).resolve().parent


@pytest.fixture(autouse=True)
def _runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(root))
    return root


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _owned_by(root: Path, name: str, pid: Optional[int]) -> Path:
    d = root / name
    d.mkdir(parents=True)
    if pid is not None:
        (d / "owner.json").write_text(json.dumps({"pid": pid, "run": name}))
    return d


# --- the run directory and its owner record -------------------------------------------


def test_a_run_directory_is_made_with_its_owner_record_which_reads_back(_runs_root: Path) -> None:
    d = runs.make_run_dir("sl-0123456789")
    assert d == _runs_root / "sl-0123456789" and d.is_dir()
    assert runs.read_owner(d) == runs.Owner(pid=os.getpid(), run="sl-0123456789", ns=runs.namespace())
    # the text other processes grep for, e.g. tests/integration/test_srt.py
    assert f'"pid": {os.getpid()},' in (d / "owner.json").read_text()


def test_a_run_directory_is_never_reused(_runs_root: Path) -> None:
    runs.make_run_dir("srt-x")
    with pytest.raises(FileExistsError):
        runs.make_run_dir("srt-x")


@pytest.mark.parametrize("text", [None, "", "{not json", "[]", '{"run": "x"}', '{"pid": "seven", "run": "x"}'])
def test_a_missing_or_unreadable_owner_record_reads_as_none(_runs_root: Path, text: Optional[str]) -> None:
    d = _runs_root / "sl-broken"
    d.mkdir(parents=True)
    if text is not None:
        (d / "owner.json").write_text(text)
    assert runs.read_owner(d) is None


def test_the_owner_record_is_written_in_one_place() -> None:
    """Only runs.py names the owner record; every backend gets its directories from make_run_dir."""
    naming = sorted(p.name for p in BACKENDS.glob("*.py") if "owner.json" in p.read_text())
    assert naming == ["runs.py"]


def test_a_run_dir_lays_out_the_world_with_fresh_canaries() -> None:
    plan = build_plan(load_policy({}))
    first, second = runs.RunDir.create("sl-a"), runs.RunDir.create("sl-b")
    before = first.lay_out(plan)
    second.lay_out(plan)
    assert first.canaries and first.canaries.keys() == second.canaries.keys()
    assert all(first.canaries[p] != second.canaries[p] for p in first.canaries)
    for path, canary in first.canaries.items():
        assert canary in first.host_path(path).read_text()
        assert path in before
    assert set(first.snapshot(plan)) >= set(before)


# --- the host listener --------------------------------------------------------------


def test_the_host_listener_records_what_reaches_it() -> None:
    listener = runs.HostListener()
    try:
        with socket.create_connection(("127.0.0.1", listener.port), timeout=2) as s:
            s.sendall(b"abc123.host\n")
        deadline = time.monotonic() + 3
        while not listener.hits and time.monotonic() < deadline:
            time.sleep(0.02)
        assert listener.hits == ["abc123.host\n"]
    finally:
        listener.close()


# --- the runner's config, retries -----------------------------------------------------


def _paths(value: Any, key: str = "") -> list[str]:
    """Every string under a "path" key, anywhere in the runner's config."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _paths(v, k)]
    if isinstance(value, list):
        return [p for v in value for p in _paths(v, key)]
    return [value] if key == "path" and isinstance(value, str) else []


def _without_paths(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _without_paths(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_paths(v, key) for v in value]
    return None if key == "path" else value


def test_runner_config_maps_every_world_path_and_nothing_else() -> None:
    plan = build_plan(load_policy({}))
    common: dict[str, Any] = dict(
        token="t0k", timeout=5.0, connect_timeout=1.0, attacker_ip="198.51.100.66", tcp_port=4444,
        host_port=1234, gateway_names=["host.docker.internal"], ca_file="/ca.pem",
    )
    plain = runs.runner_config(plan, **common)
    rebased = runs.runner_config(plan, **common, path=lambda p: "/run/world" + p)
    assert _paths(plain) and all(p.startswith("/") for p in _paths(plain))
    assert _paths(rebased) == ["/run/world" + p for p in _paths(plain)]
    assert _without_paths(plain) == _without_paths(rebased)
    assert plain["proxy"] is None and plain["ca_file"] == "/ca.pem"
    # every probe, then the scope scan's entries (off only when the plan says so)
    assert [o["id"] for o in plain["probes"]] == list(plan.probes) + list(SCAN_IDS)
    unscanned = runs.runner_config(dataclasses.replace(plan, scan=False), **common)
    assert [o["id"] for o in unscanned["probes"]] == list(plan.probes)
    assert "t0k" in json.dumps(plain["probes"])  # the run's marker is in what the runner sends


def test_retries_try_again_only_after_an_infrastructure_error_and_say_which_try_is_final() -> None:
    finals: list[bool] = []
    result = build_plan(load_policy({}))

    def flaky(final: bool) -> RunResult:
        finals.append(final)
        if len(finals) < 2:
            raise InfrastructureError("the internet service stopped")
        return StaticBackend().run(result)

    assert runs.run_with_retries(flaky, retries=1).backend == "static"
    assert finals == [False, True]

    def broken(final: bool) -> RunResult:
        finals.append(final)
        raise InfrastructureError(f"try {len(finals)}")

    finals.clear()
    with pytest.raises(InfrastructureError, match="try 3"):
        runs.run_with_retries(broken, retries=2)
    assert finals == [False, False, True]

    def crash(final: bool) -> RunResult:
        finals.append(final)
        raise ValueError("not infrastructure")

    finals.clear()
    with pytest.raises(ValueError):
        runs.run_with_retries(crash, retries=3)
    assert finals == [False]  # anything else is never retried


# --- cleanup ------------------------------------------------------------------------


@pytest.fixture()
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, runs.Scope]]]:
    """Two registered cleaners that record being called, in place of docker's and srt's."""
    calls: list[tuple[str, runs.Scope]] = []
    for name in ("_first", "_second"):
        module = ModuleType(f"grader.backends.{name}")

        def sweep(scope: runs.Scope, name: str = name) -> list[str]:
            calls.append((name, scope))
            return [f"thing of {name}"]

        module.sweep = sweep  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(runs, "CLEANERS", ("_first", "_second"))
    yield calls


def test_cleanup_walks_every_registered_cleaner_in_order_then_removes_stale_directories(
    _runs_root: Path, stand_ins: list[tuple[str, runs.Scope]]
) -> None:
    dead = _owned_by(_runs_root, "srt-dead", _dead_pid())
    alive = _owned_by(_runs_root, "sl-alive", os.getpid())
    unowned = _owned_by(_runs_root, "sl-being-made", None)
    engine = object()
    removed = runs.cleanup(engine=engine)
    assert [name for name, _ in stand_ins] == ["_first", "_second"]
    assert all(scope.engine is engine and not scope.everything for _, scope in stand_ins)
    assert removed == ["thing of _first", "thing of _second", f"directory {dead}"]
    assert not dead.exists() and alive.is_dir() and unowned.is_dir()

    stand_ins.clear()
    removed = runs.cleanup(everything=True)
    assert all(scope.everything for _, scope in stand_ins)
    assert sorted(removed[2:]) == sorted([f"directory {alive}", f"directory {unowned}"])
    assert not alive.exists() and not unowned.exists()


def test_cleanup_passes_over_a_backend_whose_dependency_is_missing_but_not_a_broken_module(
    monkeypatch: pytest.MonkeyPatch, stand_ins: list[tuple[str, runs.Scope]]
) -> None:
    class _Finder:
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
            if name == "grader.backends._needs_sdk":
                raise ModuleNotFoundError("No module named 'somesdk'", name="somesdk")

    monkeypatch.setattr(sys, "meta_path", [_Finder(), *sys.meta_path])
    monkeypatch.setattr(runs, "CLEANERS", ("_needs_sdk", "_first"))
    assert runs.cleanup() == ["thing of _first"]
    monkeypatch.setattr(runs, "CLEANERS", ("_no_such_backend", "_first"))
    with pytest.raises(ModuleNotFoundError):
        runs.cleanup()


def test_every_real_backend_is_registered_with_a_sweep() -> None:
    import importlib

    assert runs.CLEANERS == ("docker", "srt")
    for name in runs.CLEANERS:
        assert callable(importlib.import_module(f"grader.backends.{name}").sweep)


def test_a_scope_keeps_what_a_live_grader_owns() -> None:
    assert not runs.Scope().gone(os.getpid()) and runs.Scope().gone(_dead_pid())
    assert runs.Scope(everything=True).gone(os.getpid())


# --- closing a backend ------------------------------------------------------------


def test_every_backend_closes_and_works_as_a_context_manager() -> None:
    from grader.backends.srt import SrtBackend

    for b in (StaticBackend(), SrtBackend()):
        with b as entered:
            assert entered is b and isinstance(entered, Backend)
        b.close()  # twice is fine

    class Counting(Closing):
        closed = 0

        def close(self) -> None:
            self.closed += 1

    c = Counting()
    with pytest.raises(RuntimeError):
        with c:
            raise RuntimeError("a failed run still closes the backend")
    assert c.closed == 1


def test_the_snapshot_never_follows_a_link_out_of_the_world_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox that swaps a world directory for a link to the host must not make the grader read host files."""
    from grader.plan import build_plan
    from grader.policy import load_policy

    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path / "runs"))
    host_secret = tmp_path / "host-etc"
    host_secret.mkdir()
    (host_secret / "id_rsa").write_text("HOST FILE, never to be read")
    plan = build_plan(load_policy({"filesystem": {"allowWrite": ["/home/user"]}}))
    d = runs.RunDir.create("sl-link")
    try:
        d.lay_out(plan)
        ssh = d.host_path("/home/user/.ssh")
        shutil.rmtree(ssh)
        ssh.symlink_to(host_secret)  # what a sandbox with /home/user writable can do
        snap = d.snapshot(plan)
        assert "/home/user/.ssh/id_rsa" not in snap
        assert all(b"HOST FILE" not in v for v in snap.values())
        assert "/home/user/.bashrc" in snap  # the rest of the world copy is still read
    finally:
        shutil.rmtree(d.path, ignore_errors=True)
