"""tests/conftest.py's markers: a test that asks for the engine is a Docker test, whether or not it says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UNMARKED = "tests/integration/test_jobs_docker.py"  # its tests take docker_backend, and carry no marker of their own


def _collected(markexpr: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "-m", markexpr, UNMARKED], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode in (0, 5), out.stdout + out.stderr  # 5: nothing collected
    return [line for line in out.stdout.splitlines() if "::" in line]


@pytest.mark.slow  # a pytest of its own: collection alone takes seconds
def test_a_test_that_takes_the_engine_is_marked_docker() -> None:
    assert "@pytest.mark.docker" not in (ROOT / UNMARKED).read_text()  # else this proves nothing
    marked = _collected("docker")
    assert len(marked) >= 5
    assert _collected("not docker") == []  # `make test-fast` needs no engine, and runs none of them


def _root_conftest() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_folder_is_skipped_only_when_the_mark_expression_leaves_all_its_tests_out() -> None:
    excludes = getattr(_root_conftest(), "_excludes")
    assert excludes("not docker and not slow and not notebook and not browser", "notebook")
    assert excludes("not  browser", "browser")
    assert not excludes("", "notebook") and not excludes("notebook", "notebook")
    assert not excludes("not slow", "notebook")
    assert not excludes("not notebook or docker", "notebook")  # an or: -m decides, test by test
    assert not excludes("not (notebook and slow)", "notebook")
    assert not excludes("not notebooks", "notebook")


@pytest.mark.slow
def test_every_test_in_a_marked_folder_carries_its_mark_whatever_its_module_says() -> None:
    # what lets make test-fast leave tests/notebooks and tests/browser unimported: none of their tests could run
    for folder, mark in getattr(_root_conftest(), "FOLDER_MARKS").items():
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                              "-p", "no:xdist", "-m", mark, f"tests/{folder}"], cwd=ROOT, capture_output=True, text=True)
        everything = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                                     "-p", "no:xdist", f"tests/{folder}"], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0 and everything.returncode == 0, out.stdout[-2000:] + everything.stdout[-2000:]
        marked = [line for line in out.stdout.splitlines() if "::" in line]
        assert marked and marked == [line for line in everything.stdout.splitlines() if "::" in line]
