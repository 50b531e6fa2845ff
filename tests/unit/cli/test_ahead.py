"""What the warm engine prepares ahead (grader/cli/ahead.py), with a fake preparing backend: a file a command
probed is watched and its rerun held; a saved edit is prepared once it parses; a new policy file saved beside a
probed one is prepared as if probed (one there before the watch only once it changes; a link, a file elsewhere,
never); a command fires a held run only for the plan it was made for, and every other plan runs cold; never more
than WATCH_MAX held."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from grader.cli import ahead as ahead_module
from grader.cli.ahead import WATCH_MAX, Ahead
from grader.core.access import Target
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import load_policy
from test_prestart import PRACTICE, SECURE, Engine, _until

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}


@pytest.fixture()
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ahead_module, "POLL_S", 0.02)


@contextlib.contextmanager
def _watching(engine: Optional[Engine] = None) -> Iterator[tuple[Engine, Ahead]]:
    """An engine's watch over a fake preparing backend (``engine``, or a new one); closed after, and then it holds
    nothing."""
    engine = engine if engine is not None else Engine()
    ahead = Ahead(lambda: engine)  # type: ignore[arg-type,return-value]
    try:
        yield engine, ahead
    finally:
        ahead.close()
    assert engine.live() == [], "closing the watch retires every held run"


def _save(path: Path, raw: Any) -> None:
    path.write_text(json.dumps(raw) if not isinstance(raw, str) else raw)
    st = path.stat()  # a second change within one clock tick is still a change
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def _command(ahead: Ahead, engine: Engine, tmp: Path, name: str, target: Target = "srt") -> Any:
    """What ``sandbox-lab probe NAME`` does in the engine (run in ``tmp``): read the file, run its plan on the
    served backend."""
    plan = build_plan(load_policy(tmp / name, name=name), target=target)
    result = ahead.serving(engine).run(plan)  # type: ignore[arg-type]
    ahead.after(["probe", name, "--backend", "docker"], str(tmp))
    return plan, result


def test_a_probed_file_is_watched_and_its_rerun_fires_what_was_held(tmp_path: Path, fast: None) -> None:
    with _watching() as (engine, ahead):
        _save(tmp_path / "p.json", SECURE)
        plan, first = _command(ahead, engine, tmp_path, "p.json")
        assert first.run_id == "cold" and engine.cold == [plan]
        _until(lambda: len(engine.live()) == 1)
        again, second = _command(ahead, engine, tmp_path, "p.json")
        assert second.run_id == "prepared" and engine.fired == [again] and again == plan
        # held as one waiting sandbox: its replay's parts start at its go, not while the learner probes elsewhere
        # (the rerun's own rerun may be preparing already: every preparation asks the same)
        assert engine.next_at_go[:1] == [True] and set(engine.next_at_go) == {True}, engine.next_at_go


def test_held_runs_are_made_whole_only_once_no_command_was_served_for_quiet_s(
        tmp_path: Path, fast: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A held rerun waits as one sandbox (``next_at_go``) while commands come; once none was served for
    ``QUIET_S`` the engine makes it whole (``complete``), never while a command is being served. A build that
    completed at once would crowd the learner's next command (the first assertion); one that never did would
    leave every rerun to make its replay's parts during its probes (the last)."""
    monkeypatch.setattr(ahead_module, "QUIET_S", 3600.0)
    with _watching() as (engine, ahead):
        _save(tmp_path / "p.json", NAIVE)
        plan, _ = _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        time.sleep(10 * ahead_module.POLL_S)
        assert engine.completed == [], "made whole while the learner might still be running commands"
        ahead.serving(engine)  # a command begins, and is still being served
        monkeypatch.setattr(ahead_module, "QUIET_S", 0.0)
        time.sleep(10 * ahead_module.POLL_S)
        assert engine.completed == [], "made whole while a command was being served"
        ahead.after(["probe"], str(tmp_path))  # it ended (it named no file)
        _until(lambda: engine.completed[:1] == [plan])
        _, result = _command(ahead, engine, tmp_path, "p.json")
        assert result.run_id == "prepared"


def test_a_saved_edit_is_prepared_and_the_old_text_never_fires(tmp_path: Path, fast: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with _watching() as (engine, ahead):
        _save(tmp_path / "p.json", SECURE)
        old_plan, _ = _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        _save(tmp_path / "p.json", PRACTICE)
        _until(lambda: [p.plan.policy for p in engine.live()] == [load_policy(tmp_path / "p.json", name="p.json")])
        plan, result = _command(ahead, engine, tmp_path, "p.json")
        assert result.run_id == "prepared" and engine.fired == [plan] and plan != old_plan
        # an edit probed before the engine saw it: the command's own plan runs cold, the held one is not fired
        _until(lambda: len(engine.live()) == 1)
        naive = build_plan(load_policy(NAIVE))
        monkeypatch.setattr(ahead_module, "POLL_S", 30.0)  # the engine's next look comes after the command
        time.sleep(0.1)  # the poll now waits on its next 30 s round (closing the watch ends that wait at once)
        _save(tmp_path / "p.json", NAIVE)
        ahead.serving(engine).run(naive)  # type: ignore[arg-type]
        assert engine.fired == [plan] and len(engine.cold) == 2


def test_a_new_file_whose_first_write_parses_is_prepared_for_its_last(tmp_path: Path, fast: None) -> None:
    """A save is taken at first sight (no settling): a first write that parses and a second that changes it leave
    the second's run held, and only that one can fire."""
    with _watching() as (engine, ahead):
        _save(tmp_path / "p.json", SECURE)
        _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        _save(tmp_path / "mine.json", NAIVE)
        _until(lambda: _plan(tmp_path / "mine.json") in _held_plans(engine))  # the first write, prepared
        first = _plan(tmp_path / "mine.json")
        _save(tmp_path / "mine.json", PRACTICE)  # the rest of the save
        mine = _plan(tmp_path / "mine.json")
        _until(lambda: mine in _held_plans(engine) and first not in _held_plans(engine))
        plan, result = _command(ahead, engine, tmp_path, "mine.json")
        assert plan == mine and result.run_id == "prepared" and engine.fired == [mine]


def test_an_edit_that_does_not_parse_retires_the_held_run(tmp_path: Path, fast: None) -> None:
    with _watching() as (engine, ahead):
        _save(tmp_path / "p.json", SECURE)
        _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        _save(tmp_path / "p.json", '{"filesystem": {"allowWrite": ')
        _until(lambda: engine.live() == [])


def test_a_file_whose_policy_did_not_run_is_not_watched(tmp_path: Path, fast: None) -> None:
    with _watching() as (engine, ahead):
        _save(tmp_path / "p.json", SECURE)
        _save(tmp_path / "other.json", PRACTICE)
        plan = build_plan(load_policy(tmp_path / "p.json", name="p.json"))
        ahead.serving(engine).run(plan)  # type: ignore[arg-type]
        ahead.after(["grade", "other.json", "--task", "x"], str(tmp_path))  # names a file, ran another policy
        assert ahead.watched() == []


def test_never_more_than_watch_max_held(tmp_path: Path, fast: None) -> None:
    with _watching() as (engine, ahead):
        for i in range(WATCH_MAX + 2):
            raw = {"network": {"allowedDomains": [f"host{i}.example.com"]}}
            _save(tmp_path / f"p{i}.json", raw)
            _command(ahead, engine, tmp_path, f"p{i}.json")
            _until(lambda: len(engine.live()) == min(i + 1, WATCH_MAX))
        assert len(ahead.watched()) == WATCH_MAX
        assert [w.path.name for w in ahead.watched()] == [f"p{i}.json" for i in range(2, WATCH_MAX + 2)]


# --- new files saved beside a probed one ------------------------------------------------------------------------


def _held_plans(engine: Engine) -> list[RunPlan]:
    return [p.plan for p in engine.live()]


def _names(ahead: Ahead) -> list[str]:
    return [w.name for w in ahead.watched()]


def _plan(path: Path, target: Target = "srt") -> RunPlan:
    return build_plan(load_policy(path), target=target)


@pytest.mark.parametrize("where", ["policies/", "", "absolute"])
def test_a_new_file_saved_beside_a_probed_one_is_prepared_and_its_command_fires_it(tmp_path: Path, fast: None,
                                                                                    where: str) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    cwd = tmp_path if where == "policies/" else folder
    prefix = f"{folder}/" if where == "absolute" else where
    with _watching() as (engine, ahead):
        _save(folder / "naive.json", SECURE)
        _command(ahead, engine, cwd, prefix + "naive.json", target="claude-code")
        _until(lambda: len(engine.live()) == 1)
        _save(folder / "mine.json", PRACTICE)  # another policy: naive's held run cannot stand in for it
        mine = _plan(folder / "mine.json", target="claude-code")  # the probed file's target, not the default
        _until(lambda: mine in _held_plans(engine))
        assert _names(ahead) == [prefix + "naive.json", prefix + "mine.json"]  # named as the command names it
        # the same file with the default target is another plan: cold, and what is held for it stays held
        other = ahead.serving(engine).run(_plan(folder / "mine.json"))  # type: ignore[arg-type]
        assert other.run_id == "cold" and mine in _held_plans(engine)
        plan, result = _command(ahead, engine, cwd, prefix + "mine.json", target="claude-code")
        assert plan == mine and result.run_id == "prepared" and engine.fired == [mine]
        # probed with the default target: from now on, its runs are prepared for that one
        _command(ahead, engine, cwd, prefix + "mine.json")
        _until(lambda: _plan(folder / "mine.json") in _held_plans(engine))
        assert mine not in _held_plans(engine) and engine.fired == [mine]


def test_a_file_there_before_the_watch_is_prepared_only_once_it_changes(tmp_path: Path, fast: None) -> None:
    with _watching() as (engine, ahead):
        _save(tmp_path / "old.json", PRACTICE)
        _save(tmp_path / "p.json", SECURE)
        _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        # a file saved after the watch began is prepared: the directory was looked at, old.json with it
        _save(tmp_path / "new.json", NAIVE)
        _until(lambda: _plan(tmp_path / "new.json") in _held_plans(engine))
        assert "old.json" not in _names(ahead) and _plan(tmp_path / "old.json") not in [p.plan for p in engine.made]
        _save(tmp_path / "old.json", PRACTICE)  # saved again, unchanged text: a change all the same
        _until(lambda: _plan(tmp_path / "old.json") in _held_plans(engine))
        assert _names(ahead) == ["p.json", "new.json", "old.json"]


def test_a_new_file_that_does_not_parse_is_prepared_only_once_it_does(tmp_path: Path, fast: None) -> None:
    with _watching() as (engine, ahead):
        _save(tmp_path / "p.json", SECURE)
        _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        for broken, control in (('{"network": ', "c1.json"), ({"network": {"allowedDomains": "x.com"}}, "c2.json")):
            _save(tmp_path / "mine.json", broken)  # not JSON yet, then JSON but not a policy
            _save(tmp_path / control, {"network": {"allowedDomains": [f"{control}.example.com"]}})
            _until(lambda: _plan(tmp_path / control) in _held_plans(engine))  # the directory was looked at since
            assert "mine.json" not in _names(ahead) and len(engine.made) == 1 + int(control[1])
        _save(tmp_path / "mine.json", PRACTICE)  # fixed: looked at again because it changed
        mine = _plan(tmp_path / "mine.json")
        _until(lambda: mine in _held_plans(engine))
        plan, result = _command(ahead, engine, tmp_path, "mine.json")
        assert plan == mine and result.run_id == "prepared" and engine.fired == [mine]


def test_never_more_than_watch_max_held_with_many_new_files(tmp_path: Path, fast: None) -> None:
    engine = Engine()
    peak: list[int] = []
    prepare = engine.prepare

    def counted(plan: RunPlan, **kw: Any) -> Any:
        made = prepare(plan, **kw)
        peak.append(len(engine.live()))  # held at once, this one included
        return made

    engine.prepare = counted  # type: ignore[method-assign]
    with _watching(engine) as (engine, ahead):
        _save(tmp_path / "p.json", SECURE)
        _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        names = [f"n{i}.json" for i in range(WATCH_MAX + 3)]
        for name in names:  # one after another: each retires the least recently named or adopted
            _save(tmp_path / name, {"network": {"allowedDomains": [f"{name[:-5]}.example.com"]}})
            _until(lambda: _plan(tmp_path / name) in _held_plans(engine))
        assert _names(ahead) == names[-WATCH_MAX:]
        assert sorted(p.allowed_domains for p in _held_plans(engine)) == [(f"{n[:-5]}.example.com",) for n in names[-WATCH_MAX:]]
        assert max(peak) == WATCH_MAX and len(peak) == 1 + len(names)
        for name in names:  # all changed at once: still bounded, and what is held is the watched files' text
            _save(tmp_path / name, {"network": {"allowedDomains": [f"{name[:-5]}.example.org"]}})
        _until(lambda: len(ahead.watched()) == WATCH_MAX
               and sorted(id(p) for p in engine.live()) == sorted(id(w.prestart.held) for w in ahead.watched())
               and all(_plan(w.path) in _held_plans(engine) for w in ahead.watched()))
        assert all(p.plan.allowed_domains[0].endswith(".org") for p in engine.live())


def test_a_file_in_a_directory_not_watched_is_never_prepared(tmp_path: Path, fast: None) -> None:
    for sub in ("a", "a/inner", "b"):
        (tmp_path / sub).mkdir()
    with _watching() as (engine, ahead):
        _save(tmp_path / "a" / "p.json", SECURE)
        _command(ahead, engine, tmp_path, "a/p.json")
        _until(lambda: len(engine.live()) == 1)
        elsewhere = [tmp_path / "b" / "new.json", tmp_path / "a" / "inner" / "new.json", tmp_path / "new.json"]
        for i, path in enumerate(elsewhere):  # beside the file's directory, inside it, and the command's own
            _save(path, {"network": {"allowedDomains": [f"host{i}.example.com"]}})
        _save(tmp_path / "a" / "control.json", PRACTICE)
        _until(lambda: _plan(tmp_path / "a" / "control.json") in _held_plans(engine))
        assert _names(ahead) == ["a/p.json", "a/control.json"] and len(engine.made) == 2


def test_a_linked_json_is_never_read(tmp_path: Path, fast: None) -> None:
    folder, outside = tmp_path / "policies", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    with _watching() as (engine, ahead):
        _save(folder / "p.json", SECURE)
        _command(ahead, engine, folder, "p.json")
        _until(lambda: len(engine.live()) == 1)
        _save(outside / "real.json", PRACTICE)
        os.symlink(outside / "real.json", folder / "link.json")  # a new name here, a valid policy behind it
        os.mkdir(folder / "dir.json")
        _save(folder / "control.json", NAIVE)
        _until(lambda: _plan(folder / "control.json") in _held_plans(engine))
        _save(outside / "real.json", PRACTICE)  # and what it points to changes
        _save(folder / "control.json", {"network": {"allowedDomains": ["again.example.com"]}})
        _until(lambda: _plan(folder / "control.json") in _held_plans(engine))
        assert _names(ahead) == ["p.json", "control.json"] and len(engine.made) == 3


def test_a_new_file_removed_or_renamed_retires_its_held_run(tmp_path: Path, fast: None) -> None:
    with _watching() as (engine, ahead):
        _save(tmp_path / "p.json", SECURE)
        _command(ahead, engine, tmp_path, "p.json")
        _until(lambda: len(engine.live()) == 1)
        _save(tmp_path / "mine.json", PRACTICE)
        mine = _plan(tmp_path / "mine.json")
        _until(lambda: mine in _held_plans(engine))
        held = next(p for p in engine.live() if p.plan == mine)
        (tmp_path / "mine.json").rename(tmp_path / "renamed.json")
        _until(lambda: held.state == "closed")  # retired, never fired
        _until(lambda: "renamed.json" in _names(ahead) and mine in _held_plans(engine))  # the new name is new
        (tmp_path / "renamed.json").unlink()
        _until(lambda: _held_plans(engine) == [_plan(tmp_path / "p.json")])
        assert engine.fired == []
