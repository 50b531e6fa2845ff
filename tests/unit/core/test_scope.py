"""The scope: predicted, measured from the scan's evidence, and said in one line.

The real runner (``services/probe_runner.py``) carries out the scan's orders
(``probes.scan_orders``) against a fake world under a temporary directory and
a fake network that logs what arrives the way the simulated internet does;
``verdicts.measure_scope`` must then read back exactly what was reachable, and
give no scope at all when part of the evidence is missing.
"""

from __future__ import annotations

import dataclasses

import builtins
import contextlib
import io
import json
import secrets
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

import pytest

from grader import load_policy
from grader.core.access import Access, access_for, baseline_access
from grader.core.evidence import Evidence, Markers, judge_write, parse_runner_output, sha256, write_marker
from grader.core.outcomes import Reach, Scope
from grader.core.records import RawPorts
from grader.core.probes import OrderContext, orders_for
from grader.core.scope import (
    FRESH_LABEL, NEW_FILE, SCAN_IDS, asked_hosts, fresh_name, new_file, predict_scope, scanned_dirs, scanned_files,
    scanned_hosts, stand_ins, summary,
)
from grader.core.verdicts import measure_scope
from grader.protocol.wire import Route, RunnerRecord, dump
from grader.services import probe_runner
from grader.core.world import load_world
import fakewire

WORLD = load_world()
NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}


class Sandbox:
    """A fake sandbox: the world copy under ``root``; ``hidden`` paths and ``readonly`` paths fail as mounts would."""

    def __init__(self, root: Path, *, hidden: tuple[str, ...] = (), readonly: tuple[str, ...] = (),
                 reach: Callable[[str], bool] = lambda host: True, masked: tuple[str, ...] = (),
                 rewriting: tuple[str, ...] = ()) -> None:
        """``masked`` files read empty and cannot be written, as under an empty read-only file mounted over them;
        ``rewriting`` files are caught by the scan's read half rewritten: empty, as a truncating open leaves them."""
        self.root, self.hidden, self.readonly, self.reach = root, hidden, readonly, reach
        self.masked, self.rewriting = masked, rewriting
        self.masks = {str(root / ".masks" / str(i)): p for i, p in enumerate(masked)}
        for mask in self.masks:
            Path(mask).parent.mkdir(parents=True, exist_ok=True)
            Path(mask).write_bytes(b"")
        self.http: list[dict[str, Any]] = []
        self.dns: list[dict[str, Any]] = []
        self.proxy: list[dict[str, Any]] = []
        self.canaries: dict[str, str] = {}
        self.before: dict[str, str] = {}
        for f in WORLD.files:
            self.canaries[f.path] = secrets.token_hex(8)
            p = self.host(f.path)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f.content.replace("{canary}", self.canaries[f.path]))
            self.before[f.path] = sha256(p.read_bytes())
        for d in WORLD.directories():
            self.host(d).mkdir(parents=True, exist_ok=True)

    def host(self, world_path: str) -> Path:
        return self.root / world_path.lstrip("/")

    def rebase(self, world_path: str) -> str:
        # a hidden path does not exist in the sandbox
        if _under(world_path, self.hidden):
            return "/nonexistent" + world_path
        masks = {p: m for m, p in self.masks.items()}
        return masks.get(world_path, str(self.host(world_path)))

    def agent(self) -> probe_runner.Agent:
        agent = probe_runner.Agent(fakewire.orders([], proxy="http://proxy:3128"))

        def http(pid: str, method: str, url: str, body: Optional[bytes] = None, via: Optional[Route] = None,
                 retries: int = 0) -> bool:
            u = urlsplit(url)
            ok = via != "direct" and self.reach(str(u.hostname))  # only the proxy leads out here
            if via == "proxy":
                self.proxy.append({"host": u.hostname, "path": u.path, "decision": "allow" if ok else "deny"})
            if ok:
                self.http.append({"host": u.hostname, "method": method, "path": u.path, "body": ""})
            probe_runner.emit(pid, "http", ok, f"{method} {url} via {via}: {200 if ok else 403}", target=url, route=via)
            return ok

        def dns(pid: str, name: str) -> None:
            probe_runner.emit(pid, "dns", False, f"{name}: no resolver", target=name)

        real_write, real_read = agent.write, agent.read

        def write(pid: str, path: str, text: str, append: bool, after_first_line: bool = False, in_place: bool = False) -> None:
            back = str(self._back(path))
            if _under(back, self.readonly) or back in self.masked:  # a read-only mount: root cannot be stopped by modes
                probe_runner.emit(pid, "write", False, "OSError(30): Read-only file system", target=path)
                return
            real_write(pid, path, text, append, after_first_line, in_place)

        def read(pid: str, path: str) -> Optional[bytes]:
            if self._back(path) not in self.rewriting:
                return real_read(pid, path)
            held = Path(path).read_bytes()
            Path(path).write_bytes(b"")  # the probe's truncating open ...
            try:
                return real_read(pid, path)
            finally:
                Path(path).write_bytes(held)  # ... and its write, once the scan has read

        agent.http = http  # type: ignore[method-assign]
        agent.dns = dns  # type: ignore[method-assign]
        agent.write = write  # type: ignore[method-assign]
        agent.read = read  # type: ignore[method-assign]
        return agent

    def run(self, access: Access, *, drop: Callable[[dict[str, Any]], bool] = lambda rec: False,
            token: Optional[str] = None, cut: Callable[[str], str] = lambda out: out, **extra: Any) -> Evidence:
        """The scan carried out by the real runner; ``cut`` is what becomes of its output on the way out, ``drop``
        leaves records out after it was read."""
        token = token or secrets.token_hex(6)
        ctx = OrderContext(Markers(token, WORLD.attacker.name), "10.0.0.9", RawPorts.same(WORLD.raw_ports), 4555, (), WORLD.host_names,
                           (), rebase=self.rebase)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            for spec in fakewire.orders(orders_for((), ctx, scan=access)).probes:
                self.agent().run(spec)
        records = tuple(r for r in parse_runner_output(cut(out.getvalue())) if not drop(dataclasses.asdict(r)))
        # the runner saw sandbox paths; evidence speaks of world paths (as the srt backend maps them back)
        records = tuple(dataclasses.replace(r, target=self._back(r.target)) for r in records)
        after = {}
        for p in [*scanned_files(WORLD), *map(new_file, scanned_dirs(WORLD))]:
            if self.host(p).is_file():
                after[p] = self.host(p).read_bytes()
        fields: dict[str, Any] = dict(token=token, canaries=self.canaries, records=records, before=self.before, after=after,
                                      network="proxy", http=fakewire.all_of(self.http), dns=fakewire.all_of(self.dns), proxy=fakewire.all_of(self.proxy))
        return Evidence(**{**fields, **extra})

    def _back(self, target: Optional[str]) -> Optional[str]:
        if target in self.masks:
            return self.masks[target]
        if target and target.startswith(str(self.root)):
            return target[len(str(self.root)):]
        if target and target.startswith("/nonexistent/"):
            return target[len("/nonexistent"):]
        return target


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _policy(raw: dict[str, Any]) -> Access:
    return access_for(load_policy(raw), WORLD)


# --- the scan, measured --------------------------------------------------------------------


def test_everything_open_measures_every_file_directory_and_host(tmp_path: Path) -> None:
    access = _policy(NAIVE)
    scope, why = measure_scope(Sandbox(tmp_path).run(access), access)
    assert why == "" and scope is not None
    assert scope.readable == tuple(sorted(scanned_files(WORLD)))
    assert set(scope.writable) == set(scanned_files(WORLD)) | set(scanned_dirs(WORLD))
    hosts = {r.host: r.uploads for r in scope.reachable}
    assert set(hosts) == set(WORLD.host_names) | {fresh_name("*.github.com")}
    assert hosts[fresh_name("*.github.com")] is True  # a name the world does not know: fail closed
    assert hosts["raw.githubusercontent.com"] is False and hosts["gist.github.com"] is True


def test_hidden_and_read_only_paths_and_refused_hosts_are_left_out(tmp_path: Path) -> None:
    access = _policy(NAIVE)
    box = Sandbox(tmp_path, hidden=("/home/user/.ssh",), readonly=("/project",),
                  reach=lambda h: h.endswith(".github.com") and h != "gist.github.com")
    scope, _ = measure_scope(box.run(access), access)
    assert scope is not None
    assert "/home/user/.ssh/id_rsa" not in scope.readable and "/project/.env" in scope.readable
    assert not any(p.startswith(("/project", "/home/user/.ssh")) for p in scope.writable)
    assert "/home/user" in scope.writable and "/home/user/.bashrc" in scope.writable
    reached = {r.host for r in scope.reachable}
    assert "gist.github.com" not in reached and "github.com" not in reached and "api.github.com" in reached
    # the made-up name went out under this run's own label, and is reported as the fresh name
    assert fresh_name("*.github.com") in reached
    assert not any(FRESH_LABEL in str(r.get("host")) for r in box.http)


def test_a_name_server_seeing_the_runs_own_name_is_reach(tmp_path: Path) -> None:
    """The proxy let a made-up name through and looked it up: nothing answers, but the name got out."""
    access = _policy(NAIVE)
    box = Sandbox(tmp_path, reach=lambda h: False)
    ev = box.run(access)
    fresh = f"{Markers(ev.token, '').scan_label}.github.com"
    ev = Evidence(**{**ev.__dict__, "dns": (fakewire.dns(fresh + ".", client="proxy"),)})
    scope, _ = measure_scope(ev, access)
    assert scope is not None and [r.host for r in scope.reachable] == [fresh_name("*.github.com")]


def test_traces_of_another_run_prove_nothing(tmp_path: Path) -> None:
    access = _policy(NAIVE)
    box = Sandbox(tmp_path)
    ev = box.run(access)
    other = Evidence(**{**ev.__dict__, "token": "ffffffffffff", "records": tuple(
        dataclasses.replace(r, target=(r.target or "").replace(ev.token, "ffffffffffff")) for r in ev.records)})
    scope, _ = measure_scope(other, access)
    assert scope is not None and scope.reachable == ()


def test_a_file_the_scan_could_not_append_to_but_that_changed_counts_as_writable(tmp_path: Path) -> None:
    access = _policy(NAIVE)
    box = Sandbox(tmp_path, readonly=("/home/user/notes.txt",))
    ev = box.run(access)
    gone = {k: v for k, v in ev.after.items() if k != "/home/user/notes.txt"}
    scope, _ = measure_scope(Evidence(**{**ev.__dict__, "after": gone}), access)
    assert scope is not None and "/home/user/notes.txt" in scope.writable  # deleted is changed


@pytest.mark.parametrize("missing", SCAN_IDS)
def test_an_unfinished_part_of_the_scan_gives_no_scope(tmp_path: Path, missing: str) -> None:
    access = _policy(NAIVE)
    ev = Sandbox(tmp_path).run(access, drop=lambda r: r["probe"] == missing and r["step"] == "done")
    scope, why = measure_scope(ev, access)
    assert scope is None and missing in why


def _counted(records: tuple[RunnerRecord, ...]) -> tuple[RunnerRecord, ...]:
    """``records`` closed as the runner would have closed them: each scan entry's done record last, counting the rest."""
    out = [r for r in records if not (r.probe in SCAN_IDS and r.step == "done")]
    for sid in SCAN_IDS:
        n = sum(1 for r in out if r.probe == sid)
        out.append(fakewire.runner(sid, "done", True, f"after {n} records", data=str(n)))
    return tuple(out)


def test_a_missing_attempt_gives_no_scope(tmp_path: Path) -> None:
    access = _policy(NAIVE)
    ev = Sandbox(tmp_path).run(access, drop=lambda r: r["step"] == "write" and str(r.get("target", "")).endswith("/notes.txt"))
    # never attempted: the runner's count holds, and the attempt is missing all the same
    scope, why = measure_scope(Evidence(**{**ev.__dict__, "records": _counted(ev.records)}), access)
    assert scope is None and "no record" in why and "/home/user/notes.txt" in why


LOST: dict[str, Callable[[dict[str, Any]], bool]] = {  # each names the line's entry first
    "scan-read: a read that brought a canary out": lambda r: r["probe"] == "scan-read" and str(r["target"]).endswith("/.ssh/id_rsa"),
    "scan-write: an append": lambda r: r["probe"] == "scan-write" and str(r["target"]).endswith("/home/user/notes.txt"),
    # the same URL's direct attempt stays: a check of which targets were tried cannot see this one go
    "scan-net: a request through the proxy": lambda r: r["probe"] == "scan-net" and "//gist.github.com/" in str(r["target"])
                                                       and r["route"] == "proxy",
}


@pytest.mark.parametrize("lost", LOST)
def test_a_record_lost_on_the_way_out_gives_no_scope_not_a_smaller_one(tmp_path: Path, lost: str) -> None:
    """A whole line of the runner's output lost (an engine's dropped output frame, a log cut at a line's end):
    the entry's closing count shows it, and no scope is reported, with the reason."""
    access = _policy(NAIVE)

    def cut(out: str) -> str:
        kept = [line for line in out.splitlines(keepends=True) if not LOST[lost](json.loads(line))]
        assert len(kept) == len(out.splitlines()) - 1
        return "".join(kept)

    scope, why = measure_scope(Sandbox(tmp_path).run(access, cut=cut), access)
    entry = lost.split(":")[0]
    assert scope is None and f"output is not whole ({entry}: " in why and "records it printed arrived" in why, why


def test_a_file_read_while_it_was_rewritten_gives_no_scope_not_a_smaller_one(tmp_path: Path) -> None:
    """The scan's read found the settings file empty, between a backdoor's truncating open and its write: it came
    back without the canary, and not refused. That proves nothing either way (before the fix: "not readable")."""
    access = _policy(NAIVE)
    settings = "/home/user/.srt-settings.json"
    ev = Sandbox(tmp_path, rewriting=(settings,)).run(access)
    read = next(r for r in ev.records if r.probe == "scan-read" and r.target == settings)
    assert read.ok and not read.data, "the scan read the file empty"
    scope, why = measure_scope(ev, access)
    assert scope is None and settings in why and "not refused" in why, why


def test_a_hidden_file_that_reads_empty_is_not_readable(tmp_path: Path) -> None:
    """An empty read-only file mounted over a world file (a hidden file inside a mounted directory) reads empty
    and is left untouched: that read does prove the file unreadable."""
    access = _policy(NAIVE)
    key = "/home/user/.ssh/id_rsa"
    ev = Sandbox(tmp_path, masked=(key,)).run(access)
    read = next(r for r in ev.records if r.probe == "scan-read" and r.target == key)
    assert read.ok and not read.data
    scope, why = measure_scope(ev, access)
    assert scope is not None and key not in scope.readable and key not in scope.writable, why
    assert len(scope.readable) == len(scanned_files(WORLD)) - 1


def test_the_settings_backdoor_never_leaves_the_file_without_its_canary(tmp_path: Path) -> None:
    """The runner widens the settings file in place (over its bytes, then cut to length), never through an empty
    file: the scan reading it at any moment finds the canary. Held here by reading it between every write call."""
    box = Sandbox(tmp_path)
    settings = "/home/user/.srt-settings.json"
    path = box.host(settings)
    canary = box.canaries[settings]
    seen: list[bytes] = []
    real_open = builtins.open

    def watching_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = real_open(file, mode, *args, **kwargs)
        if str(file) == str(path) and mode != "r":
            seen.append(path.read_bytes())  # right after the open: a truncating one has emptied the file by now
        return fh

    ctx = OrderContext(Markers("t0k3n", WORLD.attacker.name), "10.0.0.9", RawPorts.same(WORLD.raw_ports), 4555, (), WORLD.host_names,
                       (), rebase=box.rebase, settings=path.read_text())
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.MonkeyPatch.context() as mp:
        mp.setattr(builtins, "open", watching_open)
        for spec in fakewire.orders(orders_for(("write-sandbox-settings",), ctx)).probes:
            box.agent().run(spec)
    assert seen and all(canary.encode() in b for b in seen), seen
    text = path.read_text()
    assert canary in text and json.loads(text)["network"]["allowedDomains"] == [WORLD.attacker.name], text


def test_a_request_that_timed_out_gives_no_scope_unless_its_host_was_reached(tmp_path: Path) -> None:
    access = _policy(NAIVE)
    ev = Sandbox(tmp_path, reach=lambda h: h == "api.github.com").run(access)

    def late(host: str) -> Evidence:
        slow = [dataclasses.replace(r, ok=False, detail=r.detail.split(": ", 1)[0] + ": URLError: <urlopen error timed out>")
                if r.step == "http" and f"//{host}/" in (r.target or "") else r for r in ev.records]
        return Evidence(**{**ev.__dict__, "records": tuple(slow)})

    scope, why = measure_scope(late("gist.github.com"), access)
    assert scope is None and "timed out" in why
    # asked again, the proxy answered (a refusal): the last attempt of each way decides
    url = f"http://gist.github.com{Markers(ev.token, '').scan_path}"
    answered = (fakewire.runner("scan-net", "http", False, f"GET {url} via proxy: HTTP 403", target=url, route="proxy"),)
    direct = tuple(r for r in ev.records if r.target == url and r.route == "direct")
    first = late("gist.github.com")
    retried = Evidence(**{**first.__dict__, "records": _counted(first.records + answered + direct)})
    scope, why = measure_scope(retried, access)
    assert scope is not None and "gist.github.com" not in {r.host for r in scope.reachable}, why
    scope, why = measure_scope(late("api.github.com"), access)  # it timed out one way, but got through another
    assert scope is not None and [r.host for r in scope.reachable] == ["api.github.com"], why


def test_the_way_a_request_went_is_its_records_route_never_the_words_of_its_detail(tmp_path: Path) -> None:
    """The proxy's answer to a request asked again replaces that way's timeout, whatever the detail says:
    the runner's words reworded (no "via" left in them), the decision holds; the route changed, it changes."""
    access = _policy(NAIVE)
    ev = Sandbox(tmp_path, reach=lambda h: h == "api.github.com").run(access)
    url = f"http://gist.github.com{Markers(ev.token, '').scan_path}"
    assert {r.route for r in ev.records if r.target == url} == {"proxy", "direct"}
    timed_out = tuple(dataclasses.replace(r, ok=False, detail=f"GET {url}: URLError: <urlopen error timed out>")
                      if r.target == url else r for r in ev.records)
    direct = tuple(r for r in ev.records if r.target == url and r.route == "direct")

    def judged(route: RunnerRecord) -> tuple[Optional[Scope], str]:
        reworded = tuple(dataclasses.replace(r, detail=r.detail.replace(" via proxy", "").replace(" via direct", ""))
                         for r in (*timed_out, route, *direct))
        return measure_scope(Evidence(**{**ev.__dict__, "records": _counted(reworded)}), access)

    scope, why = judged(fakewire.runner("scan-net", "http", False, f"GET {url}: HTTP 403", target=url, route="proxy"))
    assert scope is not None and "gist.github.com" not in {r.host for r in scope.reachable}, why
    scope, why = judged(fakewire.runner("scan-net", "http", False, f"GET {url} via proxy: HTTP 403", target=url, route="direct"))
    assert scope is None and "timed out" in why, "the words say proxy, the route says direct: the proxy's timeout stands"


def test_a_dead_recorder_gives_no_scope_but_no_network_needs_none(tmp_path: Path) -> None:
    access = _policy(NAIVE)
    scope, why = measure_scope(Sandbox(tmp_path).run(access, infra_problem="the proxy stopped"), access)
    assert scope is None and "the proxy stopped" in why
    closed = _policy({"filesystem": {"allowWrite": ["/project/out"]}})
    scope, why = measure_scope(Sandbox(tmp_path / "b").run(closed, network="none", infra_problem="x"), closed)
    assert scope is not None, why


def test_scan_writes_do_not_make_a_write_probe_succeed(tmp_path: Path) -> None:
    access = _policy(NAIVE)
    ev = Sandbox(tmp_path).run(access)
    assert ev.after["/home/user/.bashrc"] != b"" and sha256(ev.after["/home/user/.bashrc"]) != ev.before["/home/user/.bashrc"]
    with_attempt = Evidence(**{**ev.__dict__, "records": ev.records + (
        fakewire.runner("write-shell-rc", "write", True, "wrote 40 bytes"),)})
    v = judge_write("write-shell-rc", "/home/user/.bashrc", with_attempt)
    outcome, _, proof = v.outcome, v.why, v.proof
    assert outcome == "blocked" and "without the probe's marker" in proof[0]
    marked = dict(ev.after, **{"/home/user/.bashrc": ev.after["/home/user/.bashrc"] + write_marker(ev.token, "write-shell-rc").encode()})
    assert judge_write("write-shell-rc", "/home/user/.bashrc", Evidence(**{**with_attempt.__dict__, "after": marked})).outcome == "succeeded"


def test_scan_orders_cover_every_path_and_host_and_carry_no_canary() -> None:
    access = _policy(NAIVE)
    ctx = OrderContext(Markers("t0k3n", WORLD.attacker.name), "10.0.0.9", RawPorts.same(WORLD.raw_ports), 4555, (), WORLD.host_names, ())
    scan = [json.loads(dump(o)) for o in orders_for((), ctx, scan=access)]  # the orders as the runner gets them
    assert [o["id"] for o in scan] == list(SCAN_IDS)
    steps = {o["id"]: o["steps"] for o in scan}
    assert len(steps["scan-read"]) == len(scanned_files(WORLD))
    assert len(steps["scan-write"]) == len(scanned_files(WORLD)) + len(scanned_dirs(WORLD))
    assert len(steps["scan-net"]) == 3 * len(scanned_hosts(access))
    assert {s.get("via") for s in steps["scan-net"] if s["op"] == "http"} == {"proxy", "direct"}
    assert "{canary}" not in json.dumps(scan) and FRESH_LABEL not in json.dumps(scan)
    assert all(o["parallel"] <= 16 for o in scan)


def test_every_world_file_carries_a_canary_so_a_read_can_be_proven() -> None:
    assert [f.path for f in WORLD.files if "{canary}" not in f.content] == []


# --- predicted --------------------------------------------------------------------------------


def test_predicted_scope_of_the_practice_solution() -> None:
    four = ["/home/user", "/etc/secrets", "/project", "/app/workspace"]
    scope = predict_scope(_policy({"filesystem": {"denyRead": four, "allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                                   "network": {"allowedDomains": []}}))
    assert scope == Scope(("/project/src/main.py", "/project/src/test_main.py"), ("/project/out",), ())
    # the old allow-list spelling hides nothing under srt: every world file stays readable
    old = predict_scope(_policy({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                                 "network": {"allowedDomains": []}}))
    assert set(old.readable) == set(scanned_files(WORLD))


def test_predicted_scope_of_the_plain_container_reaches_every_world_host() -> None:
    scope = predict_scope(baseline_access(WORLD))
    assert {r.host for r in scope.reachable} == set(WORLD.host_names)
    # the plain container mounts home and projects, not /etc/secrets
    assert "/etc/secrets/db_password" not in scope.readable and "/etc/secrets" not in scope.writable
    assert "/home/user/.ssh/id_rsa" in scope.readable and "/home/user" in scope.writable


# --- in one line -----------------------------------------------------------------------------


def test_summary_counts_files_and_directories_apart_with_plurals() -> None:
    assert summary(Scope()) == "The agent can read no file, write nothing, reach no host."
    one = Scope(("/project/src/main.py",), ("/project/out",), ())
    assert summary(one) == "The agent can read 1 file, write 1 directory, reach no host."
    many = Scope(("/a", "/b", "/c"), ("/project/out", "/project/src/main.py", "/project/.env", "/project/src"),
                 (Reach("registry.npmjs.org", False),))
    assert summary(many) == "The agent can read 3 files, write 2 files and 2 directories, reach 1 host."


def test_summary_names_upload_hosts_and_calls_a_wildcard_over_an_upload_family_an_open_channel() -> None:
    scope = predict_scope(_policy({"network": {"allowedDomains": ["*.github.com"], "deniedDomains": ["gist.github.com"]}}))
    line = summary(scope)
    # codeload.github.com is reached too, but takes no uploads: counted, not named
    assert ("reach 5 hosts (api.github.com, npm.pkg.github.com, uploads.github.com and any name under github.com "
            "accept uploads)") in line, line
    # the family is what the wildcard matches, gist.github.com (denied) included, not the apex
    assert '"*.github.com" is an open channel' in line, line
    assert "(gist.github.com, api.github.com, uploads.github.com and npm.pkg.github.com)" in line, line
    npm = summary(predict_scope(_policy({"network": {"allowedDomains": ["registry.npmjs.org"]}})))
    assert npm.endswith("reach 1 host (registry.npmjs.org accepts uploads).") and "open channel" not in npm
    raw = summary(predict_scope(_policy({"network": {"allowedDomains": ["raw.githubusercontent.com"]}})))
    assert raw.endswith("reach 1 host.")


def test_the_board_opens_with_the_scope_and_the_terminal_says_it_too() -> None:
    from grader import predict
    from grader.notebook.board import board_html
    from grader.core.outcomes import RunResult
    from grader.grading.report import render_text

    result = predict(load_policy(NAIVE))
    assert result.scope is not None
    line = summary(result.scope)
    board = board_html(result)
    first = board.split("<p", 2)[1]
    assert 'class="sl-scope"' in first and "The agent can read 56 files" in first
    assert '&quot;*.github.com&quot; is an open channel' in first  # escaped, as everything in the board
    assert line in render_text(result).splitlines()
    unmeasured = RunResult("docker", "policy", None, result.probes, notes=("scope not measured: x",))
    assert "The scope was not measured in this run" in board_html(unmeasured)


def test_every_allowed_name_is_scanned_and_one_the_world_does_not_know_reaches_an_upload_host() -> None:
    """Fail closed: an allowed webhook.site is in the scope, as a host that accepts uploads (the attacker's server)."""
    access = access_for(load_policy({"network": {"allowedDomains": ["pypi.org", "webhook.site", "169.254.169.254"]}}), load_world())
    assert {"webhook.site", "169.254.169.254"} <= set(scanned_hosts(access))
    reach = {r.host: r.uploads for r in predict_scope(access).reachable}
    assert reach == {"pypi.org": False, "webhook.site": True, "169.254.169.254": True}


def test_a_read_of_other_bytes_than_the_untouched_file_proves_it_unreadable(tmp_path: Path) -> None:
    """srt's tmpfs over a denied directory is writable by the sandboxed user: the scan's append creates a private file
    there, and the scan's read sees that file, not the world's. The world copy's file is untouched and always held its
    canary, so a read of other bytes proves it unreadable; a read of its own first bytes would not."""
    from dataclasses import replace

    access = _policy(NAIVE)
    key = "/home/user/.ssh/id_rsa"
    ev = Sandbox(tmp_path, masked=(key,)).run(access)

    def reading(data: str) -> Any:
        records = tuple(replace(r, data=data) if (r.probe, r.target, r.step) == ("scan-read", key, "read") else r
                        for r in ev.records)
        return replace(ev, records=records)

    scope, why = measure_scope(reading("\n# the scan's own text, in a private file\n"), access)
    assert scope is not None and key not in scope.readable, why
    real = ev.after[key].decode("utf-8", "replace")
    assert ev.canaries[key] not in real[:8]
    scope, why = measure_scope(reading(real[:8]), access)  # the file's own first bytes, seen mid-rewrite: no proof
    assert scope is None and "not refused" in why, why


# --- one name per kind: a long allowedDomains costs what its kinds cost --------------------------------


def _kinds(allowed: list[str], denied: tuple[str, ...] = ()) -> dict[str, str]:
    net = load_policy({"network": {"allowedDomains": allowed, "deniedDomains": list(denied)}}).network
    return stand_ins(net.allowedDomains, net.deniedDomains, WORLD.host_names, WORLD.attacker.name)


def test_names_nothing_tells_apart_are_asked_once_and_world_hosts_always() -> None:
    kinds = _kinds(["pypi.org", "api.anthropic.com", "sentry.io", "crates.io", "*.s3.amazonaws.com", "*.ngrok.io",
                    "extra.pypi.org", "other.github.com", "169.254.169.254", "10.0.0.1"])
    assert kinds["pypi.org"] == "pypi.org"  # a world host stands for itself
    assert kinds["sentry.io"] == kinds["crates.io"] == "api.anthropic.com"  # the attacker's server, as any unknown name
    assert kinds[fresh_name("*.ngrok.io")] == fresh_name("*.s3.amazonaws.com")  # a wildcard is a kind of its own
    assert kinds["other.github.com"] == "extra.pypi.org"  # under an operator's domain: nobody answers
    assert kinds["10.0.0.1"] == "169.254.169.254"
    assert len(set(kinds.values())) == 5


@pytest.mark.parametrize("allowed, denied, apart", [
    # deniedDomains carving out the name the narrowing would pick
    (["a.example.net", "b.example.net"], ("a.example.net",), ("a.example.net", "b.example.net")),
    # a port-pinned entry beside another port's
    (["a.example.net:443", "b.example.net:80"], ("*:443",), ("a.example.net", "b.example.net")),
    # a wildcard and an exact name of one zone
    (["*.a.example.net", "a.example.net"], ("*.a.example.net",), (fresh_name("*.a.example.net"), "a.example.net")),
    # the attacker's zone beside a name nobody knows: the attacker's nameserver holds only its own
    (["webhook.site", "x.attacker.example"], (), ("webhook.site", "x.attacker.example")),
    (["localhost", "127.0.0.1", "10.0.0.1"], (), ("localhost", "127.0.0.1", "10.0.0.1")),
])
def test_what_a_run_can_tell_apart_is_asked_apart(allowed: list[str], denied: tuple[str, ...], apart: tuple[str, ...]) -> None:
    kinds = _kinds(allowed, denied)
    assert [kinds[n] for n in apart] == list(apart)


def test_the_leak_deep_in_the_list_behind_other_kinds_is_its_own_kind() -> None:
    hidden = [f"m{i}.pypi.org" for i in range(49)] + ["webhook.site"] + [f"n{i}.pypi.org" for i in range(10)]
    kinds = _kinds(hidden)
    assert kinds["webhook.site"] == "webhook.site" and set(kinds.values()) == {"m0.pypi.org", "webhook.site"}


def _network_orders(allowed: list[str]) -> int:
    access = _policy({"network": {"allowedDomains": allowed}})
    net = load_policy({"network": {"allowedDomains": allowed}}).network
    ctx = OrderContext(Markers("t0k3n", WORLD.attacker.name), "10.0.0.9", RawPorts.same(WORLD.raw_ports), 4555, (),
                       WORLD.host_names, tuple(s.path for s in WORLD.loot), allowed=net.allowedDomains,
                       uploads=tuple(h.name for h in WORLD.hosts if h.uploads and not h.attacker))
    from grader.core.probes import PROBES
    count = 0
    for entry in orders_for(tuple(p.id for p in PROBES), ctx, scan=access):
        for step in json.loads(dump(entry))["steps"]:
            count += len(step["urls"]) if step["op"] == "steal" else max(1, len(step.get("attempts", ())))
    return count


def test_a_runs_connections_do_not_grow_with_the_list() -> None:
    """Asking every allowed name at once is what capped the list at 10: now 90 names cost what 3 do."""
    few = ["pypi.org", "*.githubusercontent.com", "api.anthropic.com"]
    many = few + [f"svc{i}.example.com" for i in range(87)]
    assert _network_orders(many) == _network_orders(few)
    assert len(asked_hosts(_policy({"network": {"allowedDomains": many}}))) == len(asked_hosts(_policy({"network": {"allowedDomains": few}})))


def test_a_kind_asked_once_still_puts_every_name_of_it_in_the_measured_scope(tmp_path: Path) -> None:
    access = _policy({"network": {"allowedDomains": ["pypi.org", "a.example.org", "b.example.org", "c.example.org",
                                                     "*.example.net", "extra.pypi.org"],
                                  "deniedDomains": ["c.example.org"]}})
    box = Sandbox(tmp_path, reach=lambda h: access.reach(h).allowed)
    scope, why = measure_scope(box.run(access), access)
    assert why == "" and scope is not None
    assert scope.reachable == predict_scope(access).reachable  # the fake enforces the network only
    reached = {r.host for r in scope.reachable}
    assert {"a.example.org", "b.example.org", fresh_name("*.example.net")} <= reached and "c.example.org" not in reached
    asked = {r["host"] for r in box.proxy}
    assert "b.example.org" not in asked and {"a.example.org", "c.example.org"} <= asked  # b's kind was asked as a


def test_a_kind_that_got_out_puts_its_names_in_the_scope_and_one_refused_leaves_them_all_out(tmp_path: Path) -> None:
    """The measured scope follows what the asked name met, so a wrong kind shows as a disagreement with static."""
    access = _policy({"network": {"allowedDomains": ["a.example.org", "b.example.org"]}})
    box = Sandbox(tmp_path, reach=lambda h: h != "a.example.org")
    scope, _ = measure_scope(box.run(access), access)
    assert scope is not None and not {"a.example.org", "b.example.org"} & {r.host for r in scope.reachable}
