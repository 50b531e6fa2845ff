"""Graders in different processes share one simulated internet (a hub) without sharing evidence.

Each test gets a runs root of its own, so a hub of its own: what it starts,
adopts, kills or lets expire is nobody else's. The keeper is a real detached
process; the runs are real ``sandbox-lab probe`` processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest

from grader import load_policy
from grader.backends.docker.hub import POOL_SIZE, HubSharing, stop_keepers
from grader.backends.docker.lease import IDLE_ENV, HubDir, process_alive
from grader.backends.runs import cleanup
from grader.backends.docker.simnet import LABEL, LABEL_HUB
from grader.backends.docker.engine import ContainerRef, DockerEngine, NetworkRef
from grader.core.plan import build_plan

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
SECURE = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}
PIP = {"network": {"allowedDomains": ["pypi.org", "files.pythonhosted.org"]}}  # no upload: every exfiltration blocked


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_client: Any) -> Iterator[Path]:
    runs = tmp_path / "runs"
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(runs))
    monkeypatch.setenv(IDLE_ENV, "60")
    yield runs
    stop_keepers()  # whatever a test left running of its own hub
    for name in _hub_names(runs):
        assert _things(docker_client, name) == set(), f"{name} left things behind"


def _hub_names(runs: Path) -> list[str]:
    return sorted(p.name for p in runs.glob("sl-hub-*")) if runs.is_dir() else []


def _hub(runs: Path) -> HubDir:
    names = _hub_names(runs)
    assert len(names) == 1, names
    return HubDir(runs / names[0])


def _things(client: Any, hub: str) -> set[str]:
    mine = {"label": f"{LABEL_HUB}={hub}"}
    return ({c["Names"][0].lstrip("/") for c in client.api.containers(all=True, filters=mine)}
            | {n["Name"] for n in client.api.networks(filters=mine)})


def _policy(tmp: Path, name: str, raw: dict[str, Any]) -> Path:
    f = tmp / f"{name}.json"
    f.write_text(json.dumps(raw))
    return f


def _cli(policy: Path) -> "subprocess.Popen[str]":
    return subprocess.Popen([sys.executable, "-m", "grader", "probe", str(policy), "--backend", "docker", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _outcomes(proc: "subprocess.Popen[str]") -> dict[str, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, 3), err
    got = {p["id"]: p["outcome"] for p in json.loads(out)["probes"]}
    # exit 3 exactly when some probe could not be judged (its evidence was incomplete): said, never a verdict
    assert (proc.returncode == 3) == ("error" in got.values()), (proc.returncode, err)
    return got


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _warm(client: Any, hub: HubDir) -> None:
    # the pool full: a keeper still refilling builds proxies that were not there a moment before
    _wait(lambda: len(hub.pooled()) >= POOL_SIZE and not hub.trash(), 120, "the keeper fills its pool")


class _OnlyHub(DockerEngine):
    """The engine as ``cleanup --all`` sees it, narrowed to one hub's things: other people's runs share this engine."""

    def __init__(self, client: Any, hub: str) -> None:
        super().__init__(client)
        self._label = f"{LABEL_HUB}={hub}"

    def containers(self, filters: Mapping[str, object], *, all: bool = True) -> list[ContainerRef]:  # noqa: A002
        return super().containers({"label": [filters["label"], self._label]}, all=all)

    def networks(self, filters: Mapping[str, object]) -> list[NetworkRef]:
        return super().networks({"label": [filters["label"], self._label]})


def test_two_processes_share_one_internet_and_each_sees_only_its_own_evidence(root: Path, tmp_path: Path) -> None:
    naive, secure = _policy(tmp_path, "naive", NAIVE), _policy(tmp_path, "pip", PIP)
    secure_alone = _outcomes(_cli(secure))  # the first process starts the hub, and exits
    hub = _hub(root)
    assert hub.keeper_alive(), "the shared internet outlives the process that started it"
    state = hub.state()
    assert state is not None
    naive_alone = _outcomes(_cli(naive))
    # the two policies differ on channels through the network: counting the other's traffic would show
    differ = [p for p in naive_alone if naive_alone[p] == "succeeded" and secure_alone[p] == "blocked"]
    assert {"exfil-via-allowed-domain", "exfil-secret"} <= set(differ), differ
    for _ in range(2):
        procs = [_cli(naive), _cli(secure), _cli(naive), _cli(secure)]  # at once, on the one internet
        got = [_outcomes(p) for p in procs]
        assert got[0] == naive_alone and got[2] == naive_alone
        assert got[1] == secure_alone and got[3] == secure_alone
    after = hub.state()
    assert after is not None and after.container == state.container, "every run used the same internet"


def _proc(pid: int) -> str:
    """What /proc says of ``pid``: its state line and command line (a failure's evidence)."""
    try:
        status = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(("State", "PPid"))]
        return f"{status} {Path(f'/proc/{pid}/cmdline').read_bytes().replace(bytes(1), b' ').decode(errors='replace')}"
    except OSError as e:
        return f"unreadable ({e})"


def test_cleanup_all_stops_the_keeper_and_removes_the_internet_and_its_proxies(root: Path, tmp_path: Path, docker_client: Any) -> None:
    _outcomes(_cli(_policy(tmp_path, "secure", SECURE)))
    hub = _hub(root)
    _warm(docker_client, hub)
    things = _things(docker_client, hub.name)
    assert any(n.endswith("-internet") for n in things) and any(n.startswith("sl-proxy-") for n in things), things
    cleanup(engine=DockerEngine(docker_client))  # without --all: a live keeper's hub is in use, and stays
    assert hub.keeper_alive() and _things(docker_client, hub.name) == things
    pid = hub.keeper_pid()
    removed = cleanup(everything=True, engine=_OnlyHub(docker_client, hub.name))
    assert any(r.startswith(f"keeper {pid}") for r in removed), removed
    assert not process_alive(pid), f"keeper {pid} still runs: {_proc(pid)}"
    assert _things(docker_client, hub.name) == set()
    assert list(root.iterdir()) == [], "no run directory, no hub directory, no lock file"


def test_a_keepers_state_that_does_not_read_as_one_is_retired_never_adopted(root: Path, tmp_path: Path, docker_client: Any) -> None:
    """Fail closed: a state file with a key too many (a newer keeper's, a typo) is not adopted by reading what
    it can; its keeper is stopped, its things removed, and a new hub answers the same."""
    secure = _policy(tmp_path, "secure", SECURE)
    first = _outcomes(_cli(secure))
    hub = _hub(root)
    pid, name = hub.keeper_pid(), hub.name
    path = hub.path / "state.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "also": "this"}))
    assert hub.state() is None and hub.keeper_alive()
    assert _outcomes(_cli(secure)) == first
    assert not process_alive(pid), "the keeper of the state that did not read is stopped"
    assert _hub(root).keeper_alive() and _hub(root).keeper_pid() != pid
    assert docker_client.containers.list(all=True, filters={"id": raw["container"]}) == [], "its internet is removed"
    assert _hub(root).name == name


def test_a_killed_keepers_internet_and_proxies_are_swept_and_replaced(root: Path, tmp_path: Path, docker_client: Any) -> None:
    secure = _policy(tmp_path, "secure", SECURE)
    first = _outcomes(_cli(secure))
    hub = _hub(root)
    _warm(docker_client, hub)
    pid, name = hub.keeper_pid(), hub.name
    os.kill(pid, signal.SIGKILL)  # no chance to remove anything
    _wait(lambda: not process_alive(pid), 10, "the keeper dies")
    left = _things(docker_client, name)
    assert left, "the killed keeper should have left its internet behind (otherwise this test proves nothing)"
    removed = cleanup(engine=DockerEngine(docker_client))
    assert {f"container {n}" for n in left if not n.endswith(("-inet", "-sbx"))} <= set(removed), removed
    assert _things(docker_client, name) == set()
    assert not hub.path.exists()
    # the next grader starts a new hub, and gets the same answers
    assert _outcomes(_cli(secure)) == first
    assert _hub(root).keeper_alive() and _hub(root).keeper_pid() != pid


def test_a_grader_killed_mid_run_leaves_its_proxy_to_the_keeper(root: Path, tmp_path: Path, docker_client: Any) -> None:
    _outcomes(_cli(_policy(tmp_path, "secure", SECURE)))
    hub = _hub(root)
    _warm(docker_client, hub)
    script = ("import os\nfrom grader.backends.docker.backend import DockerBackend\n"
              "from grader.backends.docker.resources import Resources\n"
              "from grader.core.world import load_world\n"
              "b = DockerBackend.from_env()\nw = b.sharing.take(Resources(), load_world()).proxy\nprint(w.container.name, flush=True)\n"
              "os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    claimed = out.stdout.split()[-1]
    assert claimed in _things(docker_client, hub.name), "it claimed a warm proxy of the keeper's"
    _wait(lambda: claimed not in _things(docker_client, hub.name) and hub.claims() == [], 30,
          "the keeper removes a dead grader's proxy, and its claim")


def test_the_hub_goes_after_the_idle_period_and_never_while_a_grader_holds_it(
    root: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from grader.backends.docker.backend import DockerBackend
    from grader.backends.docker.images import find_images

    monkeypatch.setenv(IDLE_ENV, "2")
    images = find_images(DockerEngine(docker_client))
    assert images is not None
    backend = DockerBackend(DockerEngine(docker_client), images)
    r = backend.run(build_plan(load_policy(SECURE)))
    assert r.outcome("job-fetch-npm").outcome == "succeeded"
    backend.drain()
    hub = _hub(root)
    time.sleep(4)  # twice the idle period: the lease of a live grader holds
    assert hub.keeper_alive() and _things(docker_client, hub.name)
    pid, name = hub.keeper_pid(), hub.name
    backend.close()  # from now on only the idle period holds it
    _wait(lambda: not process_alive(pid, name), 30, "the keeper exits once idle")
    assert _things(docker_client, name) == set()
    _wait(lambda: list(root.iterdir()) == [], 30, "the keeper's directories go with it")


def test_a_terminal_command_shares_and_a_library_backend_keeps_its_own(
    root: Path, tmp_path: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sharing is for one-shot processes: a class's grade-batch or a lab kernel keeps nothing running after it."""
    from grader.backends.docker.backend import DockerBackend
    from grader.backends.docker.images import find_images

    monkeypatch.delenv(IDLE_ENV)
    images = find_images(DockerEngine(docker_client))
    assert images is not None
    with DockerBackend(DockerEngine(docker_client), images) as backend:
        assert not isinstance(backend.sharing, HubSharing)
    assert _hub_names(root) == []
    assert _outcomes(_cli(_policy(tmp_path, "pip", PIP)))["job-fetch-pypi"] == "succeeded"
    assert len(_hub_names(root)) == 1, "the terminal's probe started the machine's shared internet"


# --- one tenant cannot hide another's evidence, nor retire the internet ----------------------------------------

# The level-3 attack's shape: POST 64 KiB bodies of control bytes through the proxy to the one allowed
# upload host, in a loop, for the attack's whole time. It says how many got an answer.
FLOOD = """
import os, ssl, time, urllib.request
body = bytes(range(32)) * 2048
sent = 0
end = time.monotonic() + 18
while time.monotonic() < end:
    try:
        urllib.request.urlopen(urllib.request.Request("https://registry.npmjs.org/flood", data=body, method="PUT"), timeout=5).read()
        sent += 1
    except Exception as exc:
        pass
    if sent % 50 == 0:
        print("sent", sent, flush=True)
print("sent", sent)
"""

# Holds as many connections through the proxy as the sandbox may open, each a tunnel into the internet.
HOLD = """
import os, socket, time
proxy = os.environ["HTTPS_PROXY"].split("//", 1)[1].rstrip("/")
host, port = proxy.rsplit(":", 1)
held = []
end = time.monotonic() + 18
while time.monotonic() < end and len(held) < 900:
    try:
        s = socket.create_connection((host, int(port)), timeout=3)
        s.sendall(b"CONNECT registry.npmjs.org:443 HTTP/1.1\\r\\nHost: registry.npmjs.org:443\\r\\n\\r\\n")
        held.append(s)
    except OSError:
        time.sleep(0.05)
print("held", len(held), flush=True)
while time.monotonic() < end:
    time.sleep(0.5)
"""


def _attack(tmp: Path, name: str, code: str, level: int = 3, *flags: str) -> "subprocess.Popen[str]":
    script = tmp / f"{name}.py"
    script.write_text(code)
    return subprocess.Popen([sys.executable, "-m", "grader", "attack", "--level", str(level), "--backend", "docker", str(script), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _claims(hub: HubDir) -> set[str]:
    """The runs that have claimed clients at the hub's internet right now (``runlogs``)."""
    state = hub.state()
    assert state is not None
    runs = Path(state.dir) / "out" / "runs"
    return {p.name[: -len(".open")] for p in runs.glob("*.open")} if runs.is_dir() else set()


def _no_worse(got: dict[str, str], alone: dict[str, str]) -> dict[str, str]:
    """The probes whose verdict differs from the run alone other than by an error (a wrong blocked, or a wrong success)."""
    return {p: f"{got[p]} (alone: {alone[p]})" for p in alone if got[p] != alone[p] and got[p] != "error"}


@pytest.mark.parametrize("attack", [FLOOD, HOLD], ids=["flood", "slot-exhaustion"])
def test_a_tenant_flooding_or_holding_the_shared_internet_changes_no_other_runs_verdict(
        root: Path, tmp_path: Path, attack: str) -> None:
    naive = _policy(tmp_path, "naive", NAIVE)
    alone = _outcomes(_cli(naive))  # starts the hub
    assert alone["exfil-secret"] == "succeeded" and alone["exfil-via-allowed-domain"] == "succeeded", alone
    hub = _hub(root)
    state = hub.state()
    assert state is not None
    before = _claims(hub)
    hostile = _attack(tmp_path, "hostile", attack)
    try:
        _wait(lambda: bool(_claims(hub) - before) or hostile.poll() is not None, 60, "the hostile run starts")
        assert hostile.poll() is None, hostile.communicate()
        got = _outcomes(_cli(naive))  # during the attack, on the same internet
    finally:
        out, err = hostile.communicate(timeout=120)
    # Its own verdict (captured or not), never a crash. A flood past its run's log cap, or a client past its
    # connection limit, leaves the attacker's own evidence incomplete: "could not judge" (exit 3), not a miss.
    assert hostile.returncode in (0, 1) or (hostile.returncode == 3 and "could not judge" in err), err
    assert _no_worse(got, alone) == {}, (got, out[-400:])
    assert got["exfil-secret"] == "succeeded", ("the leak was seen alone, and must be seen beside the attack", got)
    after = hub.state()
    assert after is not None and after.container == state.container, "the attack got the shared internet retired"
    assert hub.keeper_alive()
    _wait(lambda: not hub.trash(), 120, "the keeper removes what the runs left")  # so its stop is quick


# --- the hostile-code suite through the hub, two tenants at once ----------------------------------------------
# test_hostile_code runs its programs through a library backend, which keeps its own internet. One-shot commands
# share the hub: here the same hostile programs run as a learner's attack (`sandbox-lab attack`, level 2: a policy
# behind the proxy, so the run claims its clients at the hub's internet) while another process probes a leaky
# policy on the same hub. Each tenant's result must equal its result alone.


def _fork_facts(res: dict[str, Any], pids_limit: int) -> dict[str, Any]:
    return {"EAGAIN": str(res["error"]).startswith("11 "), "bounded": 0 < int(res["forked"]) < pids_limit}


def _fill_facts(res: dict[str, Any], pids_limit: int) -> dict[str, Any]:
    return {"tmp": res["tmp"]["error"], "shm": res["shm"]["error"], "shm-bounded": res["shm"]["size"] <= 64 << 20,
            **{p: res[p] in ("EROFS", "EACCES") for p in ("/fill", "/var/tmp/fill", "/opt/sandbox-lab/fill")}}


def _attack_result(proc: "subprocess.Popen[str]") -> tuple[int, dict[str, Any], dict[str, Any]]:
    """The attack's exit code, its --json result, and the last JSON line its program printed."""
    out, err = proc.communicate(timeout=180)
    data = json.loads(out)
    printed = [ln for ln in data["output"].splitlines() if ln.startswith("{")]
    assert printed, (proc.returncode, err[-1000:], data["output"][-1000:])
    return proc.returncode, data, json.loads(printed[-1])


def test_the_hostile_code_suite_passes_through_the_hub_with_two_concurrent_tenants(root: Path, tmp_path: Path) -> None:
    from grader.course.ladder import level
    from test_hostile_code import FILL, FORK_BOMB, _as_attack

    pids = level(2).plan().hardening.pids_limit
    expected = {
        "fork-bomb": (FORK_BOMB, _fork_facts, {"EAGAIN": True, "bounded": True}),
        # FILL ends in a moment once its files are full: held a few seconds after it prints, so the second
        # tenant's run is sure to overlap it (the fork bomb presses on until the wall clock ends it)
        "fill": (FILL + "import time\ntime.sleep(4)\n", _fill_facts, {"tmp": "ENOSPC", "shm": "ENOSPC", "shm-bounded": True, "/fill": True,
                                     "/var/tmp/fill": True, "/opt/sandbox-lab/fill": True}),
    }
    naive = _policy(tmp_path, "naive", NAIVE)
    alone = _outcomes(_cli(naive))  # starts the hub
    assert alone["exfil-secret"] == "succeeded", alone
    hub = _hub(root)
    state = hub.state()
    assert state is not None
    for name, (program, facts, want) in expected.items():
        code, data, printed = _attack_result(_attack(tmp_path, name, _as_attack(program), 2, "--json"))
        assert code == 1 and data["captured"] is False, (name, data.get("error"))
        solo = facts(printed, pids)
        assert solo == want, (name, printed)  # alone, as test_hostile_code asserts of the same program
        before = _claims(hub)
        hostile = _attack(tmp_path, name, _as_attack(program), 2, "--json")
        try:
            _wait(lambda: bool(_claims(hub) - before) or hostile.poll() is not None, 60, "the hostile run claims its clients at the hub")
            assert hostile.poll() is None, hostile.communicate()
            got = _outcomes(_cli(naive))  # the second tenant, during the hostile run, on the same internet
        finally:
            code, data, printed = _attack_result(hostile)
        assert code == 1 and data["captured"] is False, (name, data.get("error"))  # judged, never "could not judge"
        assert facts(printed, pids) == solo, (name, printed)
        assert got == alone, (name, {p: (got[p], alone[p]) for p in alone if got[p] != alone[p]})
    after = hub.state()
    assert after is not None and after.container == state.container, "every run used the same internet"
    assert hub.keeper_alive()
    _wait(lambda: not hub.trash(), 120, "the keeper removes what the runs left")


# --- a clean run's proxy serves the next run of any process; each run's evidence is its own ------------------------


def _hub_backend(docker_client: Any, **kw: Any) -> Any:
    from grader.backends.docker.backend import DockerBackend
    from grader.backends.docker.images import find_images

    images = find_images(DockerEngine(docker_client))
    assert images is not None
    return DockerBackend(DockerEngine(docker_client), images, **kw)


def _taking(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The proxy container each run behind a hub's proxy takes, in order (a proxy it built itself: '')."""
    taken: list[str] = []
    real = HubSharing.take

    def take(self: HubSharing, made: Any, world: Any) -> Any:
        got = real(self, made, world)
        taken.append(got.proxy.container.id if not got.borrowed and got.proxy.container is not None else "")
        return got

    monkeypatch.setattr(HubSharing, "take", take)
    return taken


def _reading(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, dict[str, str]]]:
    """What each run read: the proxy's windows, in order, and its closed logs at the internet, by run id."""
    from grader.backends.docker import run as docker_run

    windows: list[str] = []
    logs: dict[str, dict[str, str]] = {}
    real_window, real_close = docker_run.proxy_window, docker_run.close_run

    def proxy_window(*a: Any, **k: Any) -> str:
        windows.append(real_window(*a, **k))
        return windows[-1]

    def close_run(out: Any, key: str) -> dict[str, str]:
        logs[key] = real_close(out, key)
        return logs[key]

    monkeypatch.setattr(docker_run, "proxy_window", proxy_window)
    monkeypatch.setattr(docker_run, "close_run", close_run)
    return windows, logs


def _records(text: str) -> list[dict[str, Any]]:
    """A log's records from the sandbox's side (its proxy, its sandbox): the services' own self-checks set aside."""
    out = []
    for line in text.splitlines():
        rec = json.loads(line)
        if "t" in rec and "client" in rec and not str(rec["client"]).startswith("127."):
            out.append(rec)
    return out


def _started(backend: Any, root: Path) -> HubDir:
    """The hub started by ``backend`` (its keeper's), with its pool of warm proxies full."""
    backend.sharing.internet()
    hub = _hub(root)
    _wait(lambda: len(hub.pooled()) >= POOL_SIZE, 120, "the keeper fills its pool")
    return hub


def _pool_by_container(hub: HubDir) -> dict[str, int]:
    return {e.container: e.runs for _, e in hub.pooled()}


def _outcomes_of(r: Any) -> dict[str, str]:
    return {o.id: o.outcome for o in r.probes}


def test_a_clean_runs_proxy_serves_the_next_backends_run_whose_evidence_is_its_own(
        root: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two backends on the hub (as two processes would be), one run each, one after another: the second run gets the
    very proxy container the first used, re-listed by the keeper, and each run's verdicts are a fresh backend's.

    The first run is the naive policy: its secret goes out to gist.github.com through the proxy, and its next session
    plays (the replay removes the run's sandbox early: it must leave the proxy). The second is a policy that allows
    only PyPI: every exfiltration blocked. Implementations that would pass a weaker test, and why this one fails them:

    * the second run builds or claims another proxy (no re-listing at all, or one the replay or the keeper destroyed):
      the proxy it takes is checked to be the first run's container, and the pool counts its runs (1, then 2);
    * the re-listed proxy's log read from its start, or from before the second run took it (``since`` lost): the
      first run's allowed requests would be in the second run's window. The verdicts alone might not show it (each
      run matches its own token), so the window itself is read: no record there predates the second run, and none
      allows a github.com host;
    * the first run's claim of the proxy's address left standing at the internet (or taking the second's): the
      second run's own logs would miss its PyPI downloads (its verdicts differ from a fresh backend's) or hold the
      first run's gist upload (checked: none predates it, none is a github.com host's);
    * lists left from the first run (the naive ``*.github.com``) that the next one would inherit before its
      hand_over: its exfiltrations would not all be blocked as a fresh backend's are.
    """
    fresh = _hub_backend(docker_client, shared_idle=0)
    try:
        alone = {name: _outcomes_of(fresh.run(build_plan(load_policy(p)))) for name, p in (("naive", NAIVE), ("pip", PIP))}
    finally:
        fresh.close()
    assert alone["naive"]["exfil-secret"] == "succeeded" and alone["pip"]["exfil-secret"] == "blocked", alone
    from grader.backends.docker import replay

    kept: list[frozenset[str]] = []
    real_releasing = replay._releasing

    def releasing(run: Any, made: Any, leftovers: Any, keep: frozenset[str] = frozenset()) -> Any:
        kept.append(keep)
        return real_releasing(run, made, leftovers, keep)

    monkeypatch.setattr(replay, "_releasing", releasing)
    taken = _taking(monkeypatch)
    windows, logs = _reading(monkeypatch)

    first = _hub_backend(docker_client, shared_idle=60)
    try:
        hub = _started(first, root)
        r1 = first.run(build_plan(load_policy(NAIVE)))
        first.drain()  # and what its runs handed the keeper is dealt with
    finally:
        first.close()
    assert _outcomes_of(r1) == alone["naive"], r1.notes
    proxy = taken[0]
    assert proxy, "the first run claimed one of the keeper's warm proxies"
    assert any(proxy in k for k in kept), ("the next session played, and was told to leave the proxy", kept)
    assert _pool_by_container(hub).get(proxy) == 1, ("re-listed after its clean run, one run served", hub.pooled())
    # every other warm proxy held here, so the next run can only be handed the first one's (or build its own); once
    # the pool is full the keeper builds no more (and none while a claim stands)
    _wait(lambda: len(hub.pooled()) >= POOL_SIZE and not hub.trash(), 60, "the keeper has refilled its pool")
    for name, entry in hub.pooled():
        if entry.container != proxy:
            os.rename(hub.path / "pool" / f"{name}.json", hub.path / "claimed" / f"{name}@{os.getpid()}.json")
    assert [e.container for _, e in hub.pooled()] == [proxy]
    between = time.time()
    read_before = len(windows)

    second = _hub_backend(docker_client, shared_idle=60)
    try:
        r2 = second.run(build_plan(load_policy(PIP)))
        second.drain()
    finally:
        second.close()
    assert taken[-1] == proxy, ("the second backend's run was handed the first run's proxy", taken)
    assert _outcomes_of(r2) == alone["pip"], (r2.notes, {p: (o, alone["pip"][p]) for p, o in _outcomes_of(r2).items()})
    assert _pool_by_container(hub).get(proxy) == 2, "re-listed again: the same container served both runs"
    # the second run's evidence: its proxy's window and its own logs at the internet, nothing of the first's
    (window,) = windows[read_before:]
    mine = _records(window) + [rec for name in ("http.jsonl", "dns.jsonl", "tcp.jsonl") for rec in _records(logs[r2.run_id][name])]
    assert mine, "the second run left records (otherwise this proves nothing)"
    early = [rec for rec in mine if rec["t"] < between]
    assert early == [], f"records from before the second run began, in its evidence: {early[:3]}"
    github = [rec for rec in mine if "github.com" in str(rec.get("host")) and rec.get("decision", "allow") == "allow"]
    assert github == [], f"the first run's allowed github.com traffic in the second run's evidence: {github[:3]}"
    assert any(rec.get("decision") == "deny" for rec in _records(window)), "the second run's own refused attempts are there"


def test_an_unclean_runs_proxy_is_removed_never_relisted(root: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that saw a recorder fail is not clean: its proxy goes with its things, though it still runs and answers.

    The failure is simulated after the sandbox, where the run asks its recorders (``Run._infra_problem``), so the
    proxy itself is healthy: a keeper that re-listed every proxy passing its own checks (running, answering a poke)
    and ignored whether the run was clean would put this one back in the pool; the test sees it there, or its
    container still standing, and fails. A clean run before it, on the same backend, shows re-listing works here.
    """
    from grader.backends.docker import run as docker_run

    taken = _taking(monkeypatch)
    backend = _hub_backend(docker_client, shared_idle=60, retries=0)
    try:
        _started(backend, root)
        ok = backend.run(build_plan(load_policy(PIP)))
        backend.drain()
        assert not ok.notes and taken[0] and _pool_by_container(_hub(root)).get(taken[0]) == 1, "a clean run's is re-listed"
        monkeypatch.setattr(docker_run.Run, "_infra_problem",
                            lambda self, net, finished: "the simulated internet stopped answering (simulated)")
        r = backend.run(build_plan(load_policy(PIP)))
        backend.drain()
    finally:
        backend.close()
    assert any("infrastructure" in n.lower() for n in r.notes), r.notes
    proxy = taken[-1]
    assert proxy, "the run claimed one of the keeper's warm proxies"
    hub = _hub(root)
    assert proxy not in _pool_by_container(hub), "an unclean run's proxy is never re-listed"
    assert docker_client.api.containers(all=True, filters={"id": proxy}) == [], "it was removed with the run's things"
