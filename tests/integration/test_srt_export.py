"""srt itself loads `export --to srt --project-root DIR --home DIR` and runs a command under it.

Needs sandbox-runtime (``scripts/ensure-srt``): skips with the reason where it cannot run, fails under ``CI``,
as tests/integration/test_srt.py does. Nothing here is simulated: a real project and home in a temporary
directory, the real srt, the real file system.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from grader import load_policy
from grader.realtools.machine import Machine, machine_export

ROOT = Path(__file__).resolve().parents[2]
CORPUS: dict[str, Any] = json.loads((ROOT / "tests" / "fixtures" / "corpus.json").read_text())["policies"]
UID = 1000  # srt and the command run unprivileged, as the srt backend runs them


def _require_srt() -> None:
    from grader.backends.srt import srt_problem

    problem = srt_problem()
    if problem:
        msg = f"sandbox-runtime cannot run here: {problem}; run scripts/ensure-srt"
        if os.environ.get("CI"):
            pytest.fail(f"{msg}; CI is set, so this fails instead of skipping", pytrace=False)
        pytest.skip(msg)


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
def test_srt_runs_a_command_under_the_export_and_enforces_it(machine_dir: Path) -> None:
    _require_srt()
    from grader.backends.srt import srt_cli

    x, h = machine_dir / "x", machine_dir / "h"
    export = machine_export(load_policy(CORPUS["practice-solution"]), "srt", Machine(str(x), str(h)))
    settings = machine_dir / "settings.json"
    settings.write_text(export.text)
    script = (
        f"cat {h}/.ssh/id_rsa; echo key=$?; cat {x}/.env; echo env=$?; cat {x}/src/main.py; echo src=$?; "
        f"touch {x}/out/made; echo out=$?; touch {x}/src/planted; echo plant=$?"
    )
    kwargs: dict[str, Any] = {}
    if os.geteuid() == 0:
        kwargs.update(user=UID, group=UID, extra_groups=[])
    node = shutil.which("node")
    assert node is not None
    proc = subprocess.run(
        [node, str(srt_cli()), "--settings", str(settings), "-c", script],
        cwd=x, env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(h), "TMPDIR": str(machine_dir), "LANG": "C.UTF-8"},
        capture_output=True, text=True, timeout=120, **kwargs,
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    out = proc.stdout
    assert "PRIVATE-KEY" not in out and "key=1" in out  # the narrow denyRead and the credential mask
    assert "API_TOKEN" not in out and "env=1" in out
    assert "hello" in out and "src=0" in out  # the project's source stays readable
    assert "out=0" in out and (x / "out" / "made").exists()  # the job's output is writable
    assert "plant=1" in out and not (x / "src" / "planted").exists()  # nothing else is
