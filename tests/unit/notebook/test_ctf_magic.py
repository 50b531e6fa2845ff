"""magic.py: the ``%%attack N`` cell magic hands the cell's text to the ladder and never runs it in the kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader.core.errors import LevelError
import fakewire

pytest.importorskip("ipywidgets", reason="ipywidgets is in the 'lab' extra")
from grader.notebook.magic import MAGIC_NAME, AttackCell, attack_cell, parse_line, register_attack_magic  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))


class _Engine:
    """A stand-in engine: it records the job it was handed and sends the flag when the code says SEND_FLAG."""

    name = "docker"

    def __init__(self) -> None:
        self.jobs: list[Any] = []
        self.plans: list[Any] = []

    def execute(self, plan: Any, job: Any) -> Any:
        from grader.core.evidence import Evidence
        from grader.core.execution import Execution

        self.jobs.append(job)
        self.plans.append(plan)
        flag = next(iter(job.plant.values())).strip()
        http = (fakewire.http(host="gist.github.com", method="POST", path="/", body=flag if "SEND_FLAG" in job.code else "hi"),)
        ev = Evidence(token="t", canaries={}, records=(), before={}, after={}, network=plan.network, http=http)
        return Execution(backend="docker", output="", exit_code=0, timed_out=False, evidence=ev)


def test_the_line_names_a_level_and_for_the_capstone_a_policy() -> None:
    assert parse_line("3") == AttackCell("3")
    assert parse_line(" 11  --policy 'my policy.json' ") == AttackCell("11", "my policy.json")
    for bad in ("", "1 2", "3 --frobnicate", "3 --policy"):
        with pytest.raises(LevelError, match=f"%%{MAGIC_NAME}"):
            parse_line(bad)


def test_the_cells_text_runs_only_in_the_sandbox(tmp_path: Path) -> None:
    bait = tmp_path / "ran-in-the-kernel"
    cell = f"open({str(bait)!r}, 'w').close()\n# SEND_FLAG\n"
    engine = _Engine()
    view = attack_cell("2", cell, backend=engine)  # type: ignore[arg-type]
    assert not bait.exists(), "the kernel never runs the cell"
    assert [j.code for j in engine.jobs] == [cell], "the ladder got the cell's text, as it is"
    assert view.result is not None and view.result.captured and 'data-captured="true"' in view.view.value
    assert view.text.layout.display == "none" and view.button.layout.display == "none", "the code cell is the editor"


def test_a_miss_in_a_cell_shows_what_the_logs_say() -> None:
    view = attack_cell("2", "print('hi')", backend=_Engine())  # type: ignore[arg-type]
    assert view.result is not None and view.result.hint_from == "evidence"
    assert "gist.github.com" in view.view.value and 'data-hint-from="evidence"' in view.view.value


def test_the_magic_registers_and_says_a_bad_line_in_the_cell() -> None:
    registered: dict[str, Any] = {}

    class _Shell:
        def register_magic_function(self, fn: Any, magic_kind: str, magic_name: str) -> None:
            registered[(magic_kind, magic_name)] = fn  # type: ignore[index]

    engine = _Engine()
    fn = register_attack_magic(engine, ipython=_Shell())  # type: ignore[arg-type]
    assert registered == {("cell", "attack"): fn}  # type: ignore[comparison-overlap]
    shown = fn("99", "print(1)")
    assert "unknown level 99" in shown.value and engine.jobs == []
    no_policy = fn("capstone", "print(1)")
    assert "it runs under your own policy" in no_policy.view.value and no_policy.result is None and engine.jobs == []
    assert "/nowhere/p.json" in fn("capstone --policy /nowhere/p.json", "print(1)").value and engine.jobs == []
    got = fn("capstone --policy " + str(ROOT / "solutions" / "attacks" / "your-own-sandbox.policy.json"), "print(1)")
    assert got.result is not None and engine.plans[-1].network == "proxy", "the capstone ran under the learner's policy"


def test_a_cell_with_only_comments_or_on_the_static_backend_runs_nothing() -> None:
    from grader.backends import StaticBackend
    from grader.course.progress import load_progress

    engine = _Engine()
    blank = attack_cell("2", "\n# your attack: Python\n   \n", backend=engine)  # type: ignore[arg-type]
    assert engine.jobs == [] and blank.result is None and "Write your attack in this cell" in blank.view.value
    static = attack_cell("2", "print(1)", backend=StaticBackend())
    assert static.result is None and "attacks cannot be predicted" in static.view.value and "sl-failed" not in static.view.value
    assert load_progress().levels == {}, "no attempt was spent"


def test_the_capstones_blank_cell_needs_no_policy_file_yet() -> None:
    engine = _Engine()
    blank = attack_cell("capstone --policy /nowhere/capstone_policy.json", "# write the policy first\n", backend=engine)  # type: ignore[arg-type]
    assert engine.jobs == [] and "Write your attack in this cell" in blank.view.value
