"""The wire records: every record and order parses back to itself, and anything else is a WireError."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

import fakewire
from grader.core.evidence import parse_lines, parse_runner_output
from grader.services import probe_runner
from grader.protocol import wire

RECORDS: dict[str, Any] = {
    "http": fakewire.http("gist.github.com", "POST", "/upload/x", "secret", via="pypi.org"),
    "http-misdirected": fakewire.http("pypi.org", "POST", "/front/x", misdirected="attacker.example", stage="http"),
    "dns": fakewire.dns("abc.0.s0.t0k3n.attacker.example."),
    "tcp": fakewire.tcp(4444, "t0k3n.direct\n"),
    "proxy": fakewire.proxy("pypi.org", "deny", method="GET", port=80, path="/x", reason="not allowed", cause="not-allowed"),
    "proxy-malformed": fakewire.proxy(None, "deny", method="", port=None, reason="malformed request", cause="bad-request"),
}


def _line(record: Any, seq: int = 0) -> str:
    return wire.dump_line(record, seq)


@pytest.mark.parametrize("name", RECORDS)
def test_every_record_parses_back_to_itself(name: str) -> None:
    record = RECORDS[name]
    assert wire.parse_record(type(record), _line(record), skip=("seq",)) == record
    assert parse_lines(type(record), _line(record) + "\n" + _line(record, 1) + "\n", name) == (record, record)


def test_the_runners_records_and_orders_parse_back_to_themselves() -> None:
    record = fakewire.runner("read-ssh-key", "read", True, "read 10 bytes", target="/home/user/.ssh/id_rsa", data="x")
    assert wire.parse_runner_line(wire.dump(record)) == record
    orders = fakewire.orders([{"id": "p", "steps": [
        {"op": "read", "path": "/a"}, {"op": "write", "path": "/a", "text": "x", "append": True,
                                       "widen": {"domains": ["a.example"], "key": "k", "marker": "m"}},
        {"op": "http", "method": "GET", "url": "http://a/", "via": "proxy", "retries": 1},
        {"op": "tcp", "host": "h", "port": 1, "payload": "p"}, {"op": "tcp_gateways", "names": ["h"], "port": 1, "payload": "p"},
        {"op": "dns", "name": "n"}, {"op": "steal", "path": "/a", "dns_suffix": ".s", "urls": ["u"], "get_urls": [],
                                     "tcp": {"host": "h", "port": 1, "prefix": "x"}},
        {"op": "front", "connect": "c", "port": 443, "attempts": [{"sni": "s", "host": "h"}], "request_path": "/", "body": "b"},
    ]}])
    assert wire.parse_orders(json.loads(wire.dump(orders))) == orders


# --- each fault is an error, per record kind and per field -------------------------------------


def _faults(record: Any) -> list[tuple[str, str]]:
    """(what was done, the corrupted line) for every field of ``record``."""
    value = json.loads(_line(record))
    out = []
    for f in dataclasses.fields(record):
        dropped = {k: v for k, v in value.items() if k != f.name}
        out.append((f"drop {f.name}", json.dumps(dropped)))
        renamed = {(k + "_x" if k == f.name else k): v for k, v in value.items()}
        out.append((f"rename {f.name}", json.dumps(renamed)))
        wrong: Any = [] if not isinstance(value[f.name], list) else "x"
        out.append((f"retype {f.name}", json.dumps({**value, f.name: wrong})))
    out.append(("extra field", json.dumps({**value, "extra": 1})))
    line = _line(record)
    out += [("truncated", line[: len(line) // 2]), ("garbage", "\x00\xff garbage"), ("not an object", "[1, 2]"), ("empty", "")]
    return out


CASES = [(name, what, line) for name, rec in RECORDS.items() for what, line in _faults(rec)]


@pytest.mark.parametrize(("name", "what", "line"), CASES, ids=[f"{n}-{w}" for n, w, _ in CASES])
def test_a_corrupted_record_is_a_wire_error(name: str, what: str, line: str) -> None:
    kind = type(RECORDS[name])
    good = _line(RECORDS[name])
    with pytest.raises(wire.WireError):
        parse_lines(kind, "\n".join([good, line, good]) + "\n", name)


@pytest.mark.parametrize("name", RECORDS)
def test_a_log_whose_last_line_is_cut_is_a_wire_error(name: str) -> None:
    good = _line(RECORDS[name])
    with pytest.raises(wire.WireError, match="cut off"):
        parse_lines(type(RECORDS[name]), good + "\n" + good[:-3], name)


def test_an_unknown_op_or_a_renamed_field_of_an_order_is_refused() -> None:
    for step in ({"op": "exfiltrate", "path": "/a"}, {"op": "read", "file": "/a"}, {"op": "read"}, {"path": "/a"},
                 {"op": "http", "method": "GET", "url": "u", "retry": 1}, {"op": "http", "method": "GET", "url": "u", "via": "tunnel"},
                 {"op": "tcp", "host": "h", "port": "1", "payload": "p"}, {"op": "write", "path": "/a", "text": "x", "append": 1}):
        with pytest.raises(wire.WireError):
            fakewire.orders([{"id": "p", "steps": [step]}])


def test_the_runner_refuses_orders_it_cannot_read_and_the_grader_gets_no_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"timeout": 1, "connect_timeout": 1, "proxy": None, "ca_file": "",
                                  "probes": [{"id": "p", "steps": [{"op": "read", "paht": "/a"}]}]}))
    monkeypatch.setattr(probe_runner, "CONFIG", str(config))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert probe_runner.main() == 2
    assert "done" not in out.getvalue()
    with pytest.raises(wire.WireError, match="refused its orders"):
        parse_runner_output(out.getvalue())


@pytest.mark.parametrize("line", ['{"probe": "p", "step": "done", "ok": true}', "Traceback (most recent call last):",
                                  '{"probe": "p", "step": "done", "ok": "yes", "detail": "", "t": 0, "target": null, "data": null}'])
def test_a_runner_line_that_is_not_a_whole_record_is_a_wire_error(line: str) -> None:
    good = wire.dump(fakewire.runner("p", "read", True))
    with pytest.raises(wire.WireError):
        parse_runner_output("\n".join([good, line, good]))


@pytest.mark.parametrize(("route", "said"), [(None, "missing field 'route'"), ("tunnel", "'tunnel' is not one of"),
                                            (1, "1 is not one of")])
def test_a_runner_record_without_a_route_it_may_have_is_refused(route: object, said: str) -> None:
    line = json.loads(wire.dump(fakewire.runner("p", "http", True, "GET http://a/ via proxy: 200", target="http://a/", route="proxy")))
    assert line["route"] == "proxy"
    if route is None:
        del line["route"]
    else:
        line["route"] = route
    with pytest.raises(wire.WireError, match=re.escape(said)):
        wire.parse_runner_line(json.dumps(line))


def test_evidence_that_could_not_be_read_whole_gives_no_verdict_at_all() -> None:
    from grader.core.evidence import Evidence
    from grader.core.probes import PROBES
    from grader.core.verdicts import judge
    from grader.core.world import load_world

    world = load_world()
    canaries = {f.path: "0123456789abcdef0123456789abcdef" for f in world.files}
    records = tuple(fakewire.runner(p.id, "done", True) for p in PROBES)
    ev = Evidence(token="t0k3n", canaries=canaries, records=records, before={}, after={}, network="proxy",
                  corrupt="http.jsonl:3: unknown field(s) ['hots']")
    outcomes = judge(ev, world, [p.id for p in PROBES])
    assert {o.outcome for o in outcomes} == {"error"} and all("hots" in o.explanation for o in outcomes)


# --- a run's closed log: every fault is an error, never a verdict ---------------------------------------------

LOGGED = {"http.jsonl": RECORDS["http"], "dns.jsonl": RECORDS["dns"], "tcp.jsonl": RECORDS["tcp"]}


def _closed(record: Any, n: int = 3, run: str = "sl-run") -> list[str]:
    return [wire.dump_line(record, i) for i in range(n)] + [wire.dump_end(run, n, False, 1.0)]


def _log_faults(lines: list[str]) -> dict[str, list[str]]:
    body, end = lines[:-1], lines[-1]
    first = json.loads(body[0])
    some_field = [k for k in first if k != "seq"][1]
    return {
        "drop a field": [json.dumps({k: v for k, v in first.items() if k != some_field}), *body[1:], end],
        "rename a field": [json.dumps({(k + "_x" if k == some_field else k): v for k, v in first.items()}), *body[1:], end],
        "truncate a line": [body[0][: len(body[0]) // 2], *body[1:], end],
        "inject garbage": [body[0], "\x1b[2J garbage", *body[1:], end],
        "reorder": [body[1], body[0], *body[2:], end],
        "duplicate": [body[0], *body, end],
        "lose the closing record": body,
        "lose a record": [*body[1:], end],
        "another run's closing record": [*body, wire.dump_end("sl-other", len(body), False, 1.0)],
        "a record after the close": [*body, end, body[0]],
        "empty": [],
    }


LOG_CASES = [(name, fault) for name in LOGGED for fault in _log_faults(_closed(LOGGED[name]))]


@pytest.mark.parametrize(("name", "fault"), LOG_CASES, ids=[f"{n}-{f}" for n, f in LOG_CASES])
def test_every_fault_of_a_closed_log_is_an_error_and_the_run_gets_no_verdict(name: str, fault: str) -> None:
    from grader.backends.runs import read_sinks

    texts = {n: "\n".join(_closed(r)) + "\n" for n, r in LOGGED.items()}
    assert read_sinks(lambda n: texts[n], "sl-run")[3] == ""  # whole, it reads
    lines = _log_faults(_closed(LOGGED[name]))[fault]
    texts[name] = "\n".join(lines) + ("\n" if lines and fault != "truncate the last line" else "")
    with pytest.raises(wire.WireError):
        read_sinks(lambda n: texts[n], "sl-run")


def test_an_overflowed_log_keeps_its_records_as_proof_and_its_silence_proves_nothing() -> None:
    from grader.backends.runs import read_sinks
    from grader.core.evidence import Evidence
    from grader.core.probes import PROBES
    from grader.core.verdicts import judge
    from grader.core.world import load_world

    lines = [wire.dump_line(RECORDS["http"], 0), wire.dump_end("sl-run", 1, True, 1.0)]
    texts = {"http.jsonl": "\n".join(lines) + "\n", **{n: wire.dump_end("sl-run", 0, False, 1.0) + "\n" for n in ("dns.jsonl", "tcp.jsonl")}}
    http, _, _, incomplete = read_sinks(lambda n: texts[n], "sl-run")
    assert http == (RECORDS["http"],) and "http.jsonl" in incomplete
    world = load_world()
    canaries = {f.path: "0123456789abcdef0123456789abcdef" for f in world.files}
    records = tuple(fakewire.runner(p.id, "done", True) for p in PROBES) + tuple(
        fakewire.runner(p.id, "http", False, "refused") for p in PROBES)
    leak = fakewire.http("attacker.example", "POST", "/", canaries["/home/user/.ssh/id_rsa"])
    ev = Evidence(token="t0k3n", canaries=canaries, records=records, before={}, after={}, network="proxy",
                  http=(leak,), incomplete=incomplete, infra_problem=incomplete)
    got = {o.id: o.outcome for o in judge(ev, world, [p.id for p in PROBES])}
    assert got["exfil-secret"] == "succeeded"  # what arrived is proof
    assert "blocked" not in got.values()  # nothing is blocked on a log that lost records


# --- a run's window of a service's whole log (the proxy's): numbered on from the line before it ---------------


def _proxy_log(tmp_path: Path, n: int) -> str:
    """``n`` proxy records as the proxy writes them (``common.JsonlLog``, the real writer)."""
    from grader.protocol.common import JsonlLog

    path = tmp_path / "proxy.jsonl"
    log = JsonlLog(str(path))
    for i in range(n):
        log.write(fakewire.proxy(f"h{i}.example"))
    return path.read_text()


def _split(text: str, at: int) -> tuple[str, str]:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:at]), "".join(lines[at:])


def _lines(w: str) -> list[str]:
    return w.splitlines(keepends=True)


PROXY_WINDOW_FAULTS = {
    "lost-first-line": lambda w: "".join(_lines(w)[1:]),
    "lost-middle-line": lambda w: "".join(ln for i, ln in enumerate(_lines(w)) if i != 2),
    "duplicated-line": lambda w: "".join([*_lines(w)[:2], _lines(w)[1], *_lines(w)[2:]]),
    "moved-line": lambda w: "".join([_lines(w)[1], _lines(w)[0], *_lines(w)[2:]]),
    "cut-last-line": lambda w: w[:-7],
    "garbage-line": lambda w: w + "not json\n",
    "no-seq": lambda w: w + wire.dump(fakewire.proxy("x.example")) + "\n",
}


def test_a_window_of_the_proxys_log_is_numbered_on_from_the_line_before_it(tmp_path: Path) -> None:
    from grader.core.evidence import log_window

    text = _proxy_log(tmp_path, 8)
    before, window = _split(text, 3)
    assert log_window(before, window, "proxy.jsonl", from_start=True) == window
    assert len(parse_lines(wire.ProxyRecord, window, "proxy.jsonl")) == 5
    assert log_window("", text, "proxy.jsonl", from_start=True) == text  # a log that began with the run
    assert log_window(before, "", "proxy.jsonl", from_start=True) == ""  # nothing logged in the run
    # a tail read from the middle of the log: its first line may be partial, its last whole line numbers the window
    assert log_window(before[5:], window, "proxy.jsonl", from_start=False) == window
    with pytest.raises(wire.WireError, match="longer than the window read"):
        log_window(_lines(before)[-1][3:], window, "proxy.jsonl", from_start=False)
    with pytest.raises(wire.WireError, match="no whole line before"):
        log_window("", window, "proxy.jsonl", from_start=False)
    with pytest.raises(wire.WireError, match="ends in a cut line"):
        log_window(before[:-1], window, "proxy.jsonl", from_start=True)
    with pytest.raises(wire.WireError, match="record out of place"):  # the window is not what follows that line
        log_window(_split(text, 2)[0], window, "proxy.jsonl", from_start=True)
    with pytest.raises(wire.WireError, match="record out of place"):  # nor does a log that began with the run start at 3
        log_window("", window, "proxy.jsonl", from_start=True)


@pytest.mark.parametrize("fault", sorted(PROXY_WINDOW_FAULTS))
def test_a_lost_repeated_moved_or_cut_proxy_line_is_a_wire_error(tmp_path: Path, fault: str) -> None:
    from grader.core.evidence import log_window

    before, window = _split(_proxy_log(tmp_path, 8), 3)
    with pytest.raises(wire.WireError):
        log_window(before, PROXY_WINDOW_FAULTS[fault](window), "proxy.jsonl", from_start=True)


def test_a_window_is_whole_up_to_a_moment_only_with_a_self_check_of_the_proxy_decided_after_it(tmp_path: Path) -> None:
    from grader.core.evidence import log_window, self_checked_after
    from grader.protocol.common import HEARTBEAT_HOST, JsonlLog

    path = tmp_path / "proxy.jsonl"
    log = JsonlLog(str(path))
    log.write(fakewire.proxy("gist.github.com", t=10.0))
    log.write(fakewire.proxy(HEARTBEAT_HOST, "deny", client="127.0.0.1", t=11.0))
    log.write(fakewire.proxy("gist.github.com", t=12.0))
    text = log_window("", path.read_text(), "proxy.jsonl", from_start=True)
    assert self_checked_after(text, 10.5) and not self_checked_after(text, 11.0)
    # the sandbox's own request to that name is no self-check of the proxy's
    log.write(fakewire.proxy(HEARTBEAT_HOST, "deny", client="10.0.0.2", t=20.0))
    assert not self_checked_after(path.read_text(), 12.0)
    log.write(fakewire.proxy(HEARTBEAT_HOST, "deny", client="127.0.0.1", t=21.0))
    whole = path.read_text()
    assert self_checked_after(whole, 12.0)
    assert not self_checked_after("".join(_lines(whole)[:-1]), 12.0)  # the log lost at its end: not shown whole
