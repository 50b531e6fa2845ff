"""The bystander check (tests/bystander.py, run by tests/conftest.py) fails a run that touched it, on one process and
under pytest-xdist's workers alike, and passes one that did not.

Each case is a real pytest run in a subprocess with the suite's own conftest as a plugin, over one Docker-marked
test file outside the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

TESTS = Path(__file__).resolve().parents[1]

STOPS_IT = '''
import os, docker, pytest

@pytest.mark.docker
def test_stops_what_it_did_not_make():
    client = docker.from_env()
    for c in client.containers.list(filters={"label": "org.example.bystander"}):
        if c.name != os.environ["OUTER_BYSTANDER"]:  # this run's own, not the suite's around it
            c.stop(timeout=1)
'''

LEAVES_IT = '''
import pytest

@pytest.mark.docker
def test_touches_nothing():
    pass
'''


def _run(tmp_path: Path, body: str, *extra: str, outer: str = "") -> subprocess.CompletedProcess[str]:
    case = tmp_path / "test_case.py"
    case.write_text(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "OUTER_BYSTANDER": outer}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path),
         "--confcutdir", str(tmp_path), *extra, str(case)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_run_that_stops_the_bystander_fails(tmp_path: Path, workers: list[str]) -> None:
    import bystander

    # the suite's own bystander (its controller's), which the case must not stop; the case's run starts its own
    done = _run(tmp_path, STOPS_IT, *workers, outer=os.environ.get(bystander.ENV, ""))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "the run touched what it did not create (the bystander)" in done.stdout
    assert "is no longer running" in done.stdout


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_run_that_leaves_it_alone_passes(tmp_path: Path, workers: list[str]) -> None:
    done = _run(tmp_path, LEAVES_IT, *workers)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "bystander" not in done.stdout
