"""Keys srt's settings schema requires: srt refuses a file without them, the lab reads them as [] and check says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader import load_policy
from grader.cli import main as cli
from grader.core.policy import SRT_REQUIRED, srt_missing
from grader.realtools.export import export

ROOT = Path(__file__).resolve().parents[3]


def test_what_srt_requires_is_named_and_a_complete_file_lacks_nothing() -> None:
    assert srt_missing(load_policy({})) == tuple(f"{s}.{k}" for s, k in SRT_REQUIRED)
    partial = load_policy({"filesystem": {"allowWrite": ["/project/out"], "allowRead": []}, "network": {"allowedDomains": []}})
    assert srt_missing(partial) == ("filesystem.denyRead", "filesystem.denyWrite", "network.deniedDomains")
    for path in sorted((ROOT / "solutions").glob("*.json")):
        assert srt_missing(load_policy(path)) == (), path.name


def test_the_srt_export_writes_every_required_list() -> None:
    settings = json.loads(export(load_policy({"filesystem": {"allowWrite": ["/project/out"]}}), "srt")[0])
    assert srt_missing(load_policy(settings)) == ()


def test_check_says_what_srt_would_refuse(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"filesystem": {"allowWrite": ["/project/out"]}}))
    assert cli.main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "lacks filesystem.denyRead, filesystem.denyWrite, network.allowedDomains, network.deniedDomains" in out
    assert "srt refuses to start" in out and "export POLICY --to srt" in out
    assert cli.main(["check", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["srt_missing"] == [
        "filesystem.denyRead", "filesystem.denyWrite", "network.allowedDomains", "network.deniedDomains"]
    assert cli.main(["check", str(ROOT / "solutions" / "scope-secure-sandbox.json")]) == 0
    assert "lacks" not in capsys.readouterr().out
