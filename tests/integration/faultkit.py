"""Helpers shared by the fault tests and the hostile-code tests: a plain module, not a conftest.

What both need to say "the run came out right": a policy that exercises the
whole network path, and the comparison of a Docker run with the static
prediction for the same policy.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any, Callable, Iterator

import pytest

from grader import load_policy, predict
from grader.core.outcomes import RunResult

__all__ = ["LOG_FAULTS", "PROXIED", "PROXY_FAULTS", "assert_as_predicted", "corrupted_logs", "corrupted_proxy_log", "outcomes_of",
           "HeldRun", "sandbox_creates"]

PROXIED = {"network": {"allowedDomains": ["github.com"]}}  # a proxy, an internet, readable secrets


def outcomes_of(r: RunResult) -> dict[str, str]:
    """Each probe's verdict in ``r``, by probe id."""
    return {o.id: o.outcome for o in r.probes}


def assert_as_predicted(r: RunResult, policy: Any) -> None:
    """Every verdict of ``r`` and its measured scope equal the static prediction for ``policy``, and the run has no notes."""
    static = predict(load_policy(policy) if policy is not None else None)
    wrong = {k: f"docker={v} static={static.outcome(k).outcome} ({r.outcome(k).evidence})"
             for k, v in outcomes_of(r).items() if v != static.outcome(k).outcome}
    assert wrong == {} and not r.notes, (wrong, r.notes)
    assert r.scope == static.scope, f"measured scope {r.scope} is not the predicted {static.scope}"


def sandbox_creates(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The create keywords of every sandbox the engine adapter makes from now on (how it was networked), in order."""
    from grader.backends.docker.engine import DockerEngine

    seen: list[dict[str, Any]] = []
    real = DockerEngine.create_container

    def create(self: DockerEngine, image: str, command: Any, **kw: Any) -> Any:
        if (kw.get("labels") or {}).get("org.sandbox-lab.role") == "sandbox":
            seen.append(kw)
        return real(self, image, command, **kw)

    monkeypatch.setattr(DockerEngine, "create_container", create)
    return seen


class HeldRun:
    """``backend.run(plan)`` on a thread of its own, held at the first line it reads from its sandbox (the sandbox
    started and its probes under way) until ``release``: a fault injected meanwhile always lands mid-run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, backend: Any, plan: Any) -> None:
        from grader.backends.docker import run as run_module

        self._go = threading.Event()
        reading = threading.Event()
        real_end = run_module.runner_end

        def held_end(raw: bytes) -> bool:
            reading.set()
            self._go.wait(60)
            return bool(real_end(raw))

        monkeypatch.setattr(run_module, "runner_end", held_end)
        self._out: list[RunResult] = []
        self._thread = threading.Thread(target=lambda: self._out.append(backend.run(plan)), daemon=True)
        self._thread.start()
        if not reading.wait(60):
            self._go.set()
            raise AssertionError("the run never waited on its sandbox")

    def release(self) -> RunResult:
        """Let the run go on, and its result once it has ended."""
        self._go.set()
        self._thread.join(120)
        assert self._out, "the run never ended"
        return self._out[0]

    def close(self) -> None:
        """Let it go whatever happened (a test's finally)."""
        self._go.set()


def _rename_first(text: str) -> str:
    lines = text.split("\n")
    first = json.loads(lines[0])
    lines[0] = json.dumps({("hots" if k == "host" else k): v for k, v in first.items()})
    return "\n".join(lines)


# What can happen to a run's closed log between the internet and the grader, each applied to the real text.
LOG_FAULTS: dict[str, tuple[str, Callable[[str], str]]] = {
    "renamed-field": ("http.jsonl", _rename_first),
    "lost-closing-record": ("dns.jsonl", lambda text: "".join(text.splitlines(keepends=True)[:-1])),
    "duplicated-line": ("http.jsonl", lambda text: text.splitlines(keepends=True)[0] + text),
    "cut-line": ("http.jsonl", lambda text: text[: len(text) // 2]),
}


@contextlib.contextmanager
def corrupted_logs(monkeypatch: pytest.MonkeyPatch, fault: str) -> Iterator[list[str]]:
    """Every Docker run inside gets its closed log ``LOG_FAULTS[fault]`` corrupted as it is read; yields what was hit."""
    from grader.backends.docker import run as docker_run

    name, corrupt = LOG_FAULTS[fault]
    real = docker_run.close_run
    hit: list[str] = []

    def close_run(out: Any, key: str) -> dict[str, str]:
        texts = real(out, key)
        if texts[name].count("\n") > 1:  # a record besides the closing one: there is something to corrupt
            texts[name] = corrupt(texts[name])
            hit.append(f"{key}:{name}")
        return texts

    monkeypatch.setattr(docker_run, "close_run", close_run)
    yield hit


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _last_of_the_sandbox(text: str) -> int:
    """The index of the window's last line that is not one of the proxy's own self-checks (from loopback)."""
    return max(i for i, ln in enumerate(_lines(text)) if '"client": "127.' not in ln)


# What can happen to a run's window of its proxy's log (``evidence.log_window``), each applied to the real text.
PROXY_FAULTS: dict[str, Callable[[str], str]] = {
    "lost-first-line": lambda text: "".join(_lines(text)[1:]),
    "lost-middle-line": lambda text: "".join(ln for i, ln in enumerate(_lines(text)) if i != len(_lines(text)) // 2),
    "duplicated-line": lambda text: _lines(text)[0] + text,
    # cut inside the sandbox's last record: it and the proxy's self-checks since are gone
    "cut-line": lambda text: "".join(_lines(text)[: _last_of_the_sandbox(text)]) + _lines(text)[_last_of_the_sandbox(text)][:20],
    # cut at a line boundary after the sandbox's last record: the proxy's self-checks since are gone
    "lost-last-lines": lambda text: "".join(_lines(text)[: _last_of_the_sandbox(text) + 1]),
}


@contextlib.contextmanager
def corrupted_proxy_log(monkeypatch: pytest.MonkeyPatch, fault: str) -> Iterator[list[str]]:
    """Every Docker run inside gets its window of the proxy's log corrupted by ``PROXY_FAULTS[fault]`` as it is read."""
    from grader.backends import runlogs  # where a run's window of the proxy's log is read (``proxy_window``)

    real = runlogs.log_window
    hit: list[str] = []

    def log_window(before: str, text: str, name: str, *, from_start: bool) -> str:
        if text.count("\n") > 2:  # records besides the first: something to lose in the middle
            text = PROXY_FAULTS[fault](text)
            hit.append(name)
        return real(before, text, name, from_start=from_start)

    monkeypatch.setattr(runlogs, "log_window", log_window)
    yield hit
