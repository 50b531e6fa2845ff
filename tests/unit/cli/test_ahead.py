"""What the warm engine prepares ahead (grader/cli/ahead.py), with a fake preparing backend: a file a command
probed is watched and its rerun held; a saved edit is prepared once it parses; a command fires a held run only
for the plan it was made for, and every other plan runs cold; never more than WATCH_MAX held."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.cli import ahead as ahead_module
from grader.cli.ahead import WATCH_MAX, Ahead
from grader.core.plan import build_plan
from grader.core.policy import load_policy
from test_prestart import PRACTICE, SECURE, Engine, _until

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}


@pytest.fixture()
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ahead_module, "POLL_S", 0.02)
    monkeypatch.setattr(ahead_module, "SETTLE_S", 0.02)


def _save(path: Path, raw: Any) -> None:
    path.write_text(json.dumps(raw) if not isinstance(raw, str) else raw)
    import os

    st = path.stat()  # a second change within one clock tick is still a change
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def _command(ahead: Ahead, engine: Engine, tmp: Path, name: str) -> Any:
    """What ``sandbox-lab probe NAME`` does in the engine: read the file, run its plan on the served backend."""
    plan = build_plan(load_policy(tmp / name, name=name))
    result = ahead.serving(engine).run(plan)  # type: ignore[arg-type]
    ahead.after(["probe", name, "--backend", "docker"], str(tmp))
    return plan, result


def test_a_probed_file_is_watched_and_its_rerun_fires_what_was_held(tmp_path: Path, fast: None) -> None:
    engine = Engine()
    ahead = Ahead(lambda: engine)  # type: ignore[arg-type,return-value]
    try:
        _save(tmp_path / "p.json", SECURE)
        plan, first = _command(ahead, engine, tmp_path, "p.json")
        assert first.run_id == "cold" and engine.cold == [plan]
        _until(lambda: len(engine.live()) == 1)
        again, second = _command(ahead, engine, tmp_path, "p.json")
        assert second.run_id == "prepared" and engine.fired == [again] and again == plan
    finally:
        ahead.close()
    assert engine.live() == []


def test_a_saved_edit_is_prepared_and_the_old_text_never_fires(tmp_path: Path, fast: None) -> None:
    engine = Engine()
    ahead = Ahead(lambda: engine)  # type: ignore[arg-type,return-value]
    try:
        _save(tmp_path / "p.json", SECURE)
        old_plan, _ = _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        _save(tmp_path / "p.json", PRACTICE)
        _until(lambda: [p.plan.policy for p in engine.live()] == [load_policy(tmp_path / "p.json", name="p.json")])
        plan, result = _command(ahead, engine, tmp_path, "p.json")
        assert result.run_id == "prepared" and engine.fired == [plan] and plan != old_plan
        # an edit probed before the engine saw it: the command's own plan runs cold, the held one is not fired
        _until(lambda: len(engine.live()) == 1)
        _save(tmp_path / "p.json", NAIVE)
        ahead.serving(engine).run(build_plan(load_policy(tmp_path / "p.json", name="p.json")))  # type: ignore[arg-type]
        assert engine.fired == [plan] and len(engine.cold) == 2
    finally:
        ahead.close()
    assert engine.live() == []


def test_an_edit_that_does_not_parse_retires_the_held_run(tmp_path: Path, fast: None) -> None:
    engine = Engine()
    ahead = Ahead(lambda: engine)  # type: ignore[arg-type,return-value]
    try:
        _save(tmp_path / "p.json", SECURE)
        _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        _save(tmp_path / "p.json", '{"filesystem": {"allowWrite": ')
        _until(lambda: engine.live() == [])
    finally:
        ahead.close()


def test_a_file_whose_policy_did_not_run_is_not_watched(tmp_path: Path, fast: None) -> None:
    engine = Engine()
    ahead = Ahead(lambda: engine)  # type: ignore[arg-type,return-value]
    try:
        _save(tmp_path / "p.json", SECURE)
        _save(tmp_path / "other.json", PRACTICE)
        plan = build_plan(load_policy(tmp_path / "p.json", name="p.json"))
        ahead.serving(engine).run(plan)  # type: ignore[arg-type]
        ahead.after(["grade", "other.json", "--task", "x"], str(tmp_path))  # names a file, ran another policy
        assert ahead.watched() == []
    finally:
        ahead.close()


def test_never_more_than_watch_max_held(tmp_path: Path, fast: None) -> None:
    engine = Engine()
    ahead = Ahead(lambda: engine)  # type: ignore[arg-type,return-value]
    try:
        for i in range(WATCH_MAX + 2):
            raw = {"network": {"allowedDomains": [f"host{i}.example.com"]}}
            _save(tmp_path / f"p{i}.json", raw)
            _command(ahead, engine, tmp_path, f"p{i}.json")
            _until(lambda: len(engine.live()) == min(i + 1, WATCH_MAX))
        assert len(ahead.watched()) == WATCH_MAX
        assert [w.path.name for w in ahead.watched()] == [f"p{i}.json" for i in range(2, WATCH_MAX + 2)]
    finally:
        ahead.close()
    assert engine.live() == []
