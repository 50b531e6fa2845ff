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
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Optional

import pytest

from grader import load_policy
from grader.backends import cleanup as cleaning
from grader.backends import owners, runs
from grader.backends.base import Backend, Closing
from grader.backends.files import host_files
from grader.backends.static import StaticBackend
from grader.core.errors import InfrastructureError
from grader.core.outcomes import RunResult
from grader.core.plan import build_plan
from grader.core.records import RawPorts
from grader.protocol.wire import dump_orders
from grader.core.scope import SCAN_IDS
from owned import dead_pid, stamped_dir

BACKENDS = Path(runs.__file__).resolve().parent


@pytest.fixture(autouse=True)
def _runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(root))
    return root


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
    assert runs.read_owner(d) == runs.Owner(pid=os.getpid(), run="sl-0123456789", ns=runs.namespace(),
                                         started=owners.process_start(os.getpid()))
    # the text other processes grep for, e.g. tests/integration/test_srt.py
    assert f'"pid": {os.getpid()},' in (d / "owner.json").read_text()


def test_a_pid_the_kernel_gave_to_another_process_is_not_the_owner(_runs_root: Path) -> None:
    """pids wrap at pid_max (32768 here, and the fork-bomb tests cycle thousands a second): a dead grader's pid held
    by a new process kept its directory and containers from cleanup (CI, twice). The start time tells them apart."""
    me, started = os.getpid(), owners.process_start(os.getpid())
    assert started is not None and owners.pid_alive(me, started) and owners.pid_alive(me)
    assert not owners.pid_alive(me, started + 1)  # this pid, another process's start: not the one meant
    reused, mine, old = (_runs_root / name for name in ("sl-reused", "sl-mine", "sl-old-record"))
    for d in (reused, mine, old):
        d.mkdir(parents=True)
    (reused / "owner.json").write_text(json.dumps({"pid": me, "run": "sl-reused", "ns": runs.namespace(), "started": started + 1}))
    owners.write_owner(mine, me)
    (old / "owner.json").write_text(json.dumps({"pid": me, "run": "sl-old-record", "ns": runs.namespace()}))
    assert cleaning.Scope().stale_dirs() == [reused]  # a record without a start is judged by its pid, as before
    assert cleaning.Scope(automatic=True).stale_dirs() == [reused]


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
    """Only owners.py names the owner record; every backend gets its directories from make_run_dir."""
    naming = sorted(p.name for p in BACKENDS.glob("*.py") if "owner.json" in p.read_text())
    assert naming == ["owners.py"]


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


def test_the_world_copy_and_run_files_have_their_modes_whatever_the_umask() -> None:
    """Under umask 000 the world copy used to be 0777 and its files 0666 (only the 0700 run directory kept them
    private): every directory and file made for a run now has its mode set explicitly."""
    plan = build_plan(load_policy({}))
    old = os.umask(0)
    try:
        d = runs.RunDir.create("sl-umask")
        d.lay_out(plan)
        files = host_files(d.path / "svc")
        files.mkdir("out/runs")
        files.write("config.json", b"{}")
    finally:
        os.umask(old)
    modes = {str(p.relative_to(d.path)): stat.S_IMODE(p.lstat().st_mode) for p in [d.path, *d.path.rglob("*")]}
    world_files = {f.path.lstrip("/"): f.mode for f in plan.world.files}
    assert modes["."] == (0o710 if os.geteuid() == 0 else 0o700)  # root lets the sandbox user's group pass (_hand_over)
    for rel, mode in modes.items():
        assert not mode & 0o022, f"{rel} is {oct(mode)}: writable by others"
        world_rel = rel.removeprefix("world/")
        if rel.startswith("world/") and world_rel in world_files:
            assert mode == world_files[world_rel], (rel, oct(mode))
    assert modes["mask/empty"] == 0o444 and modes["mask"] == 0o755 and modes["owner.json"] == 0o644
    assert modes["svc/out/runs"] == modes["svc/out"] == modes["svc"] == 0o755 and modes["svc/config.json"] == 0o644


def test_make_dir_and_write_file_set_the_mode_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)  # too tight is as wrong as too loose: the sandbox's user could not pass
    try:
        owners.make_dir(tmp_path / "a" / "b", parents=True)
        owners.write_file(tmp_path / "a" / "b" / "f", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "a" / "b" / "f").stat().st_mode) == 0o644
    (tmp_path / "link").symlink_to(tmp_path / "a" / "b" / "f")
    with pytest.raises(OSError):
        owners.write_file(tmp_path / "link", "through a link")  # never written through a link in its place
    assert (tmp_path / "a" / "b" / "f").read_text() == "x"


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


def _external_addresses() -> list[str]:
    """This machine's IPv4 addresses where other machines arrive: the route out's source address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # picks a route; sends nothing
            found = s.getsockname()[0]
        except OSError:
            return []
    return [] if found.startswith("127.") or found in runs.sandbox_addresses() else [found]


def test_the_host_listener_listens_only_where_a_sandbox_reaches_this_machine() -> None:
    """Finding 6: the host listener bound every interface (0.0.0.0): any machine on the network could reach it."""
    listener = runs.HostListener()
    try:
        assert listener.addresses == runs.sandbox_addresses()
        assert "127.0.0.1" in listener.addresses and "0.0.0.0" not in listener.addresses
        for sock in listener.socks:
            assert sock.getsockname()[0] != "0.0.0.0" and sock.getsockname()[1] == listener.port
        for address in listener.addresses:  # each of them hears a sandbox, on the one port it was told
            with socket.create_connection((address, listener.port), timeout=2) as s:
                s.sendall(f"via {address}\n".encode())
        deadline = time.monotonic() + 3
        while len(listener.hits) < len(listener.addresses) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sorted(listener.hits) == sorted(f"via {a}\n" for a in listener.addresses)
        for address in _external_addresses():  # where other machines arrive: nothing listens
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((address, listener.port), timeout=2).close()
    finally:
        listener.close()
    with pytest.raises(ValueError, match="named addresses only"):
        runs.HostListener(["0.0.0.0"])


def test_the_sandbox_addresses_are_loopback_and_the_bridges_of_this_machine() -> None:
    addresses = runs.sandbox_addresses()
    assert addresses[0] == "127.0.0.1" and len(set(addresses)) == len(addresses)
    bridges = Path("/sys/class/net")
    names = {p.name for p in bridges.iterdir() if (p / "bridge").is_dir()} if bridges.is_dir() else set()
    assert len(addresses) - 1 <= len(names)  # one address at most per bridge, none for anything else


def test_the_signing_agent_is_reachable_only_through_the_run_directory(_runs_root: Path) -> None:
    """A socket's mode is 0777 (the sandbox's user connects): the private run directory is what keeps others out."""
    d = runs.make_run_dir("sl-agent")
    (d / "run").mkdir()
    agent = runs.SigningAgent(d / "run" / "a.sock", "k3y")
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(3)
            s.connect(str(d / "run" / "a.sock"))
            s.sendall(b"SIGN hello\n")
            assert s.recv(100).startswith(b"SIG ")
        assert (d.stat().st_mode & 0o077) == 0
    finally:
        agent.close()


# --- the runner's config, retries -----------------------------------------------------


_PATH_KEYS = ("path", "also")


def _paths(value: Any, key: str = "") -> list[str]:
    """Every string under a "path" key (or in an "also" list: more files a steal sends), anywhere in the runner's config."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _paths(v, k)]
    if isinstance(value, list):
        return [p for v in value for p in _paths(v, key)]
    return [value] if key in _PATH_KEYS and isinstance(value, str) else []


def _without_paths(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _without_paths(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_paths(v, key) for v in value]
    return None if key in _PATH_KEYS else value


def test_runner_config_maps_every_world_path_and_nothing_else() -> None:
    plan = build_plan(load_policy({}))
    common: dict[str, Any] = dict(
        token="t0k", timeout=5.0, connect_timeout=1.0, attacker_ip="198.51.100.66", raw=RawPorts.same(plan.world.raw_ports),
        host_port=1234, gateway_names=["host.docker.internal"], ca_file="/ca.pem",
    )
    plain = json.loads(dump_orders(runs.runner_config(plan, **common)))  # config.json, as the runner gets it
    rebased = json.loads(dump_orders(runs.runner_config(plan, **common, path=lambda p: "/run/world" + p)))
    assert _paths(plain) and all(p.startswith("/") for p in _paths(plain))
    assert _paths(rebased) == ["/run/world" + p for p in _paths(plain)]
    assert _without_paths(plain) == _without_paths(rebased)
    assert plain["proxy"] is None and plain["ca_file"] == "/ca.pem"
    # every probe, then the scope scan's entries (off only when the plan says so)
    assert [o["id"] for o in plain["probes"]] == list(plan.probes) + list(SCAN_IDS)
    unscanned = runs.runner_config(dataclasses.replace(plan, scan=False), **common)
    assert [o.id for o in unscanned.probes] == list(plan.probes)
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
    monkeypatch.setattr(cleaning, "CLEANERS", ("_first", "_second"))
    yield calls


def test_cleanup_walks_every_registered_cleaner_in_order_then_removes_stale_directories(
    _runs_root: Path, stand_ins: list[tuple[str, runs.Scope]]
) -> None:
    dead = _owned_by(_runs_root, "srt-dead", dead_pid())
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
    monkeypatch.setattr(cleaning, "CLEANERS", ("_needs_sdk", "_first"))
    assert runs.cleanup() == ["thing of _first"]
    monkeypatch.setattr(cleaning, "CLEANERS", ("_no_such_backend", "_first"))
    with pytest.raises(ModuleNotFoundError):
        runs.cleanup()


def test_every_real_backend_is_registered_with_a_sweep() -> None:
    import importlib

    assert runs.CLEANERS == ("docker.backend", "srt")
    for name in runs.CLEANERS:
        assert callable(importlib.import_module(f"grader.backends.{name}").sweep)


def test_a_scope_keeps_what_a_live_grader_owns() -> None:
    assert not runs.Scope().gone(os.getpid()) and runs.Scope().gone(dead_pid())
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
    from grader.core.plan import build_plan
    from grader.core.policy import load_policy

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


# --- who may touch a run's files ------------------------------------------------------


def test_the_runs_root_and_each_run_directory_are_the_graders_users_alone(_runs_root: Path) -> None:
    old = os.umask(0)  # whatever the umask says
    try:
        d = runs.make_run_dir("sl-private")
    finally:
        os.umask(old)
    assert (d.stat().st_mode & 0o777) == 0o700
    # root lets the sandbox's user pass through to what it is given (srt); nobody lists it
    assert (_runs_root.stat().st_mode & 0o777) == (0o711 if os.geteuid() == 0 else 0o700)
    _runs_root.chmod(0o755)  # an older version's root: ours, so tightened
    runs.make_run_dir("sl-private-2")
    assert (_runs_root.stat().st_mode & 0o777) == (0o711 if os.geteuid() == 0 else 0o700)


def test_a_runs_root_that_is_not_ours_alone_is_refused(_runs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.core.errors import BackendError

    _runs_root.mkdir()
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 4321)  # the same directory, seen by another user
    with pytest.raises(BackendError, match=r"belongs to uid \d+, not to this user.*SANDBOX_LAB_RUNS"):
        runs.make_run_dir("sl-x")
    monkeypatch.setattr(os, "geteuid", lambda: me)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(link))
    with pytest.raises(BackendError, match="not a directory"):
        runs.make_run_dir("sl-x")
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)  # anyone may rename our root away and put theirs in its place
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(open_parent / "runs"))
    with pytest.raises(BackendError, match="lets another user replace"):
        runs.make_run_dir("sl-x")
    open_parent.chmod(0o1777)  # sticky, as /tmp: only the owner renames its entries
    assert runs.make_run_dir("sl-x").is_dir()
    assert list(elsewhere.iterdir()) == []


def test_the_default_runs_root_is_one_per_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDBOX_LAB_RUNS")
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    assert runs.runs_root().name == "sandbox-lab-runs-1234"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert runs.runs_root().name == "sandbox-lab-runs"


_AS_USER = r"""
import json, os, sys
from grader import load_policy
from grader.backends import runs
from grader.core.plan import build_plan
plan = build_plan(load_policy({}))
d = runs.RunDir.create("sl-nonroot")
d.lay_out(plan)
print(json.dumps({"root": str(runs.runs_root()), "run": str(d.path), "handed": d.handed,
                  "key": str(d.host_path("/home/user/.ssh/id_rsa")),
                  "modes": {str(p): p.lstat().st_mode & 0o7777 for p in [d.world, *d.world.rglob("*")]}}))
"""

_PEEK = r"""
import json, os, sys
out = {}
for p in sys.argv[1:]:
    try:
        with open(p, "rb") as fh:
            out[p] = "read"
    except IsADirectoryError:
        out[p] = "listed" if os.listdir(p) is not None else "?"
    except PermissionError:
        out[p] = "refused"
print(json.dumps(out))
"""


def _as(uid: int, code: str, *args: str, env: Optional[dict[str, str]] = None) -> Any:
    repo = Path(runs.__file__).resolve().parents[2]
    out = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=60, cwd="/", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo), **(env or {})},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to start graders as other users (setpriv)")
def test_a_grader_that_is_not_root_keeps_the_world_copy_from_every_other_local_user() -> None:
    """Finding 6: a grader that is not root made the world copy world-readable and writable (0666, dirs 0777):
    any local user could read its canaries or change a run's world, and with it the verdicts."""
    import tempfile

    grader_uid, other_uid = 4001, 4002
    # in the open, as /tmp/sandbox-lab-runs-<uid> is: only the grader's own modes can keep others out
    home = Path(tempfile.mkdtemp(prefix="sl-nonroot-", dir="/tmp"))
    try:
        home.chmod(0o755)
        os.chown(home, grader_uid, grader_uid)
        _check_private(home, grader_uid, other_uid)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _check_private(home: Path, grader_uid: int, other_uid: int) -> None:
    made = _as(grader_uid, _AS_USER, env={"SANDBOX_LAB_RUNS": str(home / "runs")})
    assert not made["handed"]  # neither root nor the world's user: the engine gets it through a volume
    assert (Path(made["root"]).stat().st_mode & 0o777) == 0o700 and (Path(made["run"]).stat().st_mode & 0o777) == 0o700
    opened = {p: oct(m) for p, m in made["modes"].items() if m & 0o022}
    assert opened == {}, f"writable by others: {opened}"
    assert made["modes"][made["key"]] == 0o600  # the world's own mode
    # another local user can neither read the key, nor list the run, nor reach a file the world made readable
    readable = next(p for p, m in made["modes"].items() if m & 0o004 and Path(p).is_file())
    peek = _as(other_uid, _PEEK, made["key"], made["run"], readable, made["root"])
    assert set(peek.values()) == {"refused"}, peek


# --- the sweep at every run's start ---------------------------------------------------


def test_a_run_start_sweeps_dead_graders_directories_and_keeps_everyone_elses(
    _runs_root: Path, stand_ins: list[tuple[str, runs.Scope]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 6: leftovers of a killed grader were swept only by an explicit `cleanup`, never by the next run."""
    monkeypatch.delenv(runs.SWEEP_ENV, raising=False)
    here, dead = runs.namespace(), dead_pid()
    gone = stamped_dir(_runs_root, "sl-dead", dead, here)
    live = stamped_dir(_runs_root, "sl-live", os.getpid(), here)
    foreign = stamped_dir(_runs_root, "sl-other-container", dead, "another-boot/4:4026532000")  # its pid means nothing here
    old = stamped_dir(_runs_root, "sl-before-stamps", dead, None)  # made before stamps: only an explicit cleanup judges it
    engine = object()
    runs.RunDir.create("sl-new", engine=engine)
    record = runs.swept()
    assert record["removed"] == ["thing of _first", "thing of _second", f"directory {gone}"]
    assert not gone.exists() and live.is_dir() and foreign.is_dir() and old.is_dir()
    assert all(scope.automatic and scope.engine is engine and not scope.everything for _, scope in stand_ins)
    assert runs.Scope(automatic=True).gone(dead, here) and not runs.Scope(automatic=True).gone(dead, None)
    assert not runs.Scope().gone(dead, "another-boot/4:4026532000")
    # an explicit cleanup still takes what was made before stamps
    assert f"directory {old}" in runs.cleanup()
    assert foreign.is_dir()


def test_the_sweep_runs_at_most_once_a_minute_and_only_one_at_a_time(
    _runs_root: Path, stand_ins: list[tuple[str, runs.Scope]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(runs.SWEEP_ENV, raising=False)
    first = runs.sweep_soon()
    assert first is not None
    first.join()
    assert runs.sweep_soon() is None  # within the minute: nothing to do
    stamp = _runs_root.with_name(_runs_root.name + runs.SWEEP_STAMP)
    assert (stamp.stat().st_mode & 0o777) == 0o600
    assert list(_runs_root.iterdir()) == []  # beside the root, never in it: an empty root means nothing left
    stamp.write_text(json.dumps({"started": time.time() - runs.SWEEP_EVERY - 1}))
    import fcntl

    with stamp.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process is sweeping now
        assert runs.sweep_soon() is None
    again = runs.sweep_soon()
    assert again is not None
    again.join()
    stamp.write_text(json.dumps({"started": time.time() + 3600}))  # a clock set back: as if never swept
    third = runs.sweep_soon()
    assert third is not None
    third.join()
    assert len(stand_ins) == 6  # three sweeps, two cleaners each
    monkeypatch.setenv(runs.SWEEP_ENV, "0")
    stamp.write_text("{}")
    assert runs.sweep_soon() is None


def test_the_sweep_leaves_directories_alone_while_a_hub_is_being_decided_and_survives_a_failing_engine(
    _runs_root: Path, stand_ins: list[tuple[str, runs.Scope]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from grader.backends.docker.lease import hub_dir

    monkeypatch.delenv(runs.SWEEP_ENV, raising=False)
    gone = stamped_dir(_runs_root, "sl-dead", dead_pid(), runs.namespace())
    hub = hub_dir("services:1", "{}")
    with hub.lock():  # a grader adopting, starting or retiring a hub
        assert runs.cleanup(automatic=True) == ["thing of _first", "thing of _second"]
    assert gone.is_dir()

    def broken(scope: runs.Scope) -> list[str]:
        raise ConnectionError("engine away")

    monkeypatch.setattr(sys.modules["grader.backends._first"], "sweep", broken)
    assert runs.cleanup(automatic=True) == ["thing of _second", f"directory {gone}"]
    with pytest.raises(ConnectionError):
        runs.cleanup()  # an explicit cleanup says so


def test_a_run_sweep_imports_no_backend_it_does_not_run(_runs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It runs in a thread beside the run's own imports; a backend this process never loaded has no engine here."""
    monkeypatch.setattr(cleaning, "CLEANERS", ("_never_imported",))
    assert runs.cleanup(automatic=True) == []
    with pytest.raises(ModuleNotFoundError):
        runs.cleanup()


def test_a_run_directory_appears_with_its_owner_record_and_leaves_no_staging(_runs_root: Path) -> None:
    d = runs.make_run_dir("sl-atomic")
    assert sorted(p.name for p in _runs_root.iterdir()) == ["sl-atomic"]
    assert runs.read_owner(d) == runs.Owner(pid=os.getpid(), run="sl-atomic", ns=runs.namespace(),
                                         started=owners.process_start(os.getpid()))


def test_a_grader_killed_while_making_a_run_directory_leaves_what_cleanup_removes(_runs_root: Path) -> None:
    """A dead grader's half-made directory (no record yet, or its record but not renamed): an explicit cleanup
    removes both; a live grader's is kept. Before, a kill between mkdir and the record left an unowned directory
    that no cleanup removed (CI: test_grader_killed_mid_batch_resumes_without_loss_or_regrading)."""
    pid = dead_pid()
    bare = _runs_root / f"{owners.STAGING}{pid}-sl-bare"
    bare.mkdir(parents=True)
    recorded = _runs_root / f"{owners.STAGING}{pid}-sl-recorded"
    recorded.mkdir()
    owners.write_owner(recorded, pid, run="sl-recorded")
    mine = _runs_root / f"{owners.STAGING}{os.getpid()}-sl-mine"
    mine.mkdir()
    assert owners.staging_pid(bare) == pid and owners.staging_pid(_runs_root / "sl-x") is None
    assert owners.staging_pid(_runs_root / f"{owners.STAGING}12") is None  # no run name after the pid
    assert sorted(cleaning.Scope().stale_dirs()) == sorted([bare, recorded])
    assert cleaning.Scope(automatic=True).stale_dirs() == [recorded]  # a bare one's pid has no namespace to judge it
    cleaning.cleanup()
    assert sorted(p.name for p in _runs_root.iterdir()) == [mine.name]


class _Killed(BaseException):
    """The grader's SIGKILL, at one step of a removal: nothing after it runs (no ``except OSError`` catches it)."""


def test_a_grader_killed_at_any_step_of_removing_a_run_directory_leaves_what_cleanup_removes(
        _runs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whichever unlink or rmdir the kill comes before, what is left still carries its owner record, so the next
    cleanup takes it. Before, ``rmtree`` could take the record first: a batch killed mid-removal left a directory
    no cleanup removed for ten minutes (CI: test_grader_killed_mid_batch_resumes_without_loss_or_regrading)."""
    from grader.backends.quota import remove_dir

    real_unlink, real_rmdir, real_rename, real_getpid = os.unlink, os.rmdir, os.rename, os.getpid
    step = 0
    while True:
        step += 1
        pid = dead_pid()
        d = _runs_root / f"sl-kill{step}"
        d.mkdir(parents=True)
        owners.write_owner(d, pid, run=d.name)
        for i in range(12):  # enough entries that the record is seldom the directory's last in its own order
            (d / f"f{i}").write_text("x")
            (d / f"world{i}" / "home").mkdir(parents=True)
            (d / f"world{i}" / "home" / "key").write_text("k")
        calls = 0

        def killing(real: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                if calls == step:
                    raise _Killed()
                return real(*args, **kwargs)
            return call

        monkeypatch.setattr(os, "unlink", killing(real_unlink))
        monkeypatch.setattr(os, "rmdir", killing(real_rmdir))
        monkeypatch.setattr(os, "rename", killing(real_rename))
        monkeypatch.setattr(os, "getpid", lambda: pid)  # the remover is the grader that dies
        try:
            remove_dir(d)
            killed = False
        except _Killed:
            killed = True
        finally:
            monkeypatch.setattr(os, "unlink", real_unlink)
            monkeypatch.setattr(os, "rmdir", real_rmdir)
            monkeypatch.setattr(os, "rename", real_rename)
            monkeypatch.setattr(os, "getpid", real_getpid)
        left = sorted(_runs_root.iterdir())
        if not killed:
            assert not left
            break
        # the dead grader's, by its record or by the pid its name carries: an explicit cleanup takes it
        assert sorted(cleaning.Scope().stale_dirs()) == left, f"killed at step {step}: {left}"
        cleaning.cleanup()
        assert not any(_runs_root.iterdir()), f"killed at step {step}: cleanup left {left}"
    assert step > 30  # every file and directory above was one step


def test_a_run_directory_is_never_renamed_over_an_existing_one(_runs_root: Path) -> None:
    """rename(2) replaces an empty directory: make_run_dir must refuse, never take over another run's name."""
    (_runs_root / "sl-taken").mkdir(parents=True)
    with pytest.raises(FileExistsError):
        runs.make_run_dir("sl-taken")
    staged = _runs_root / "staged"
    staged.mkdir()
    with pytest.raises(FileExistsError):  # the rename itself refuses too, past a check another maker raced
        owners._rename_new(staged, _runs_root / "sl-taken")
    assert staged.is_dir() and not any((_runs_root / "sl-taken").iterdir())


def test_a_directory_without_a_record_is_kept_while_young_and_removed_once_abandoned(_runs_root: Path) -> None:
    """A directory with no owner record is a hub being made (seconds), or what a removal left behind (a quota tmpfs
    mounted while the tree was removed: a plain container's scratch, found an hour later in CI): kept while young,
    removed by any cleanup once unchanged for ``ABANDONED_S``."""
    young = _runs_root / "sl-young"
    (young / "scratch").mkdir(parents=True)
    old = _runs_root / "sl-left"
    (old / "scratch").mkdir(parents=True)
    past = time.time() - cleaning.ABANDONED_S - 5
    os.utime(old, (past, past))
    assert cleaning.Scope().stale_dirs() == [old]
    assert cleaning.Scope(automatic=True).stale_dirs() == [old]
    cleaning.cleanup()
    assert sorted(p.name for p in _runs_root.iterdir()) == ["sl-young"]


def _evidence_with_proxy(*records: Any) -> Any:
    """A proxy run's evidence, read by ``gather_evidence`` from a proxy log of ``records`` and empty sinks: every
    probe reported an attempt that was refused, and nothing arrived at the simulated internet."""
    import fakewire
    from grader.core.probes import PROBES
    from grader.protocol import wire

    plan = build_plan(load_policy({"network": {"allowedDomains": ["*.github.com"]}}))
    run_dir = runs.RunDir.create("sl-unreached")
    before = run_dir.lay_out(plan)
    texts = {"proxy.jsonl": "".join(wire.dump_line(r, i) + "\n" for i, r in enumerate(records)),
             **{n: wire.dump_end("sl-run", 0, False, 1.0) + "\n" for n in ("http.jsonl", "dns.jsonl", "tcp.jsonl")}}
    listener = runs.HostListener()
    try:
        return runs.gather_evidence(
            run_dir, plan, token="t0k3n", before=before, network="proxy", logs=lambda n: texts[n], listener=listener,
            raw=RawPorts.same(plan.world.raw_ports), infra="", timed_out=False, run_key="sl-run",
            records=tuple(fakewire.runner(p.id, "done", True) for p in PROBES)
            + tuple(fakewire.runner(p.id, "http", False, "HTTP 502") for p in PROBES))
    finally:
        listener.close()


def test_an_allowed_request_that_never_reached_the_internet_leaves_nothing_blocked() -> None:
    """The proxy let an upload through (the policy allows it, and the real tool would have sent it), but the
    simulated internet's name server gave no answer: the internet's silence about it proves nothing, so no probe
    of the run reads "blocked" from it. A policy that leaked by an allowed domain must never pass because the
    internet was busy at that moment."""
    import fakewire
    from grader.core.probes import PROBES
    from grader.core.verdicts import judge
    from grader.core.world import load_world

    lost = fakewire.proxy("gist.github.com", cause="internet-unreachable",
                          reason="allowed by *.github.com; DNS lookup failed: no DNS answer for gist.github.com in 2.0 s")
    ev = _evidence_with_proxy(fakewire.proxy("api.github.com"), lost)
    assert "never reached the simulated internet (gist.github.com: DNS lookup failed: no DNS answer" in ev.incomplete
    assert ev.incomplete in ev.infra_problem
    got = {o.id: o.outcome for o in judge(ev, load_world(), [p.id for p in PROBES])}
    assert "blocked" not in got.values(), got


@pytest.mark.parametrize("cause", ["forwarded", "no-such-host", "upstream-failed"])
def test_a_request_that_reached_the_internet_or_failed_on_a_fact_of_the_world_proves_what_it_proves(cause: str) -> None:
    """What games the rule above (every allowed request that did not arrive made a "cannot tell") would turn every
    policy that names a host the world lacks into an error: no such host, a name DNS cannot carry and a request
    forwarded are evidence as before."""
    import fakewire

    ev = _evidence_with_proxy(fakewire.proxy("nothere.github.com", cause=cause, reason="allowed by *.github.com; x"))
    assert ev.incomplete == "" and ev.infra_problem == ""


def test_the_proxys_own_self_check_that_found_no_internet_is_no_upload() -> None:
    """srt's parent proxy lets every name through, its self-check's too; a check made once the run's internet has
    gone finds no name server. That record is the proxy's own, never a request of the run's (every srt run failed
    so once)."""
    import fakewire
    from grader.protocol.common import HEARTBEAT_HOST

    ev = _evidence_with_proxy(fakewire.proxy(HEARTBEAT_HOST, method="GET", port=80, client="127.0.0.1",
                                             cause="internet-unreachable", reason="any host; DNS lookup failed: refused"))
    assert ev.incomplete == "" and ev.infra_problem == ""


def test_the_srt_sweep_ends_a_dead_runs_listed_session_and_not_another_naming_its_directory(tmp_path: Path) -> None:
    """``srt.sweep`` (``runs.cleanup``'s part for srt) reads each process's session from ``/proc/<pid>/stat``
    (``owners.stat_fields``): a process of a listed session whose command line names the run directory is ended;
    one of another session naming the same directory is left alone."""
    from grader.backends.srt import sweep

    run = tmp_path / "srt-dead"
    run.mkdir()
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    ours = subprocess.Popen([*sleep, f"{run}/internet"], start_new_session=True)
    stranger = subprocess.Popen([*sleep, f"{run}/internet"], start_new_session=True)  # a session not listed
    try:
        (run / "pids").write_text(f"{ours.pid}\n")
        deadline = time.monotonic() + 5
        while str(run) not in Path(f"/proc/{ours.pid}/cmdline").read_text() and time.monotonic() < deadline:
            time.sleep(0.01)  # its arguments are set once its exec is done
        scope = type("Scope", (), {"stale_dirs": lambda self: [run]})()
        assert sweep(scope) == [f"process {ours.pid}"]  # type: ignore[arg-type]
        assert ours.wait(timeout=10) == -9
        assert stranger.poll() is None
    finally:
        for p in (ours, stranger):
            p.kill()
            p.wait()
