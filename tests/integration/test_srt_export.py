"""srt itself loads `export --to srt --project-root DIR --home DIR` and runs a command under it.

Needs sandbox-runtime (``scripts/ensure-srt``; the ``run_srt`` fixture of conftest.py starts it): skips with the reason where it cannot run, fails under ``CI``,
as tests/integration/test_srt.py does. Nothing here is simulated: a real project and home in a temporary
directory, the real srt, the real file system.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from grader import load_policy
from grader.realtools.machine import Machine, machine_export

ROOT = Path(__file__).resolve().parents[2]
CORPUS: dict[str, Any] = json.loads((ROOT / "tests" / "fixtures" / "corpus.json").read_text())["policies"]
UID = 1000  # the unprivileged user srt runs as (conftest.SRT_UID): it must reach the machine directory


@pytest.fixture
def machine_dir() -> Iterator[Path]:
    # not under pytest's tmp_path: the unprivileged user must be able to reach it
    base = Path(tempfile.mkdtemp(prefix="sandbox-lab-srt-export-"))
    base.chmod(0o755)
    (base / "x" / "src").mkdir(parents=True)
    (base / "x" / "out").mkdir()
    (base / "h" / ".ssh").mkdir(parents=True)
    (base / "h" / ".ssh" / "id_rsa").write_text("PRIVATE-KEY\n")
    (base / "x" / ".env").write_text("API_TOKEN=secret\n")
    (base / "x" / "src" / "main.py").write_text("print('hello')\n")
    if os.geteuid() == 0:
        for p in [base, *base.rglob("*")]:
            os.chown(p, UID, UID)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_srt_runs_a_command_under_the_export_and_enforces_it(machine_dir: Path, run_srt: Any) -> None:
    x, h = machine_dir / "x", machine_dir / "h"
    export = machine_export(load_policy(CORPUS["practice-solution"]), "srt", Machine(str(x), str(h)))
    settings = machine_dir / "settings.json"
    settings.write_text(export.text)
    script = (
        f"cat {h}/.ssh/id_rsa; echo key=$?; cat {x}/.env; echo env=$?; cat {x}/src/main.py; echo src=$?; "
        f"touch {x}/out/made; echo out=$?; touch {x}/src/planted; echo plant=$?"
    )
    proc = run_srt(settings, script, x, h, machine_dir)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    out = proc.stdout
    assert "PRIVATE-KEY" not in out and "key=1" in out  # the narrow denyRead and the credential mask
    assert "API_TOKEN" not in out and "env=1" in out
    assert "hello" in out and "src=0" in out  # the project's source stays readable
    assert "out=0" in out and (x / "out" / "made").exists()  # the job's output is writable
    assert "plant=1" in out and not (x / "src" / "planted").exists()  # nothing else is
