"""The disk one run may write (grader/backends/quota.py): a tmpfs of a fixed size over the world copy, removed with it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from grader.backends.quota import (
    SCRATCH_FILES, WORLD_BYTES, WORLD_FILES, DiskQuotaExceeded, bound_scratch, bound_world, filled, remove_dir,
)

needs_root = pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0,
                                reason="mounting a tmpfs needs root on Linux (elsewhere the world copy is not bounded)")


def _mounted(path: Path) -> bool:
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        return any(line.split()[1] == str(path) for line in fh)


@needs_root
def test_a_writer_stops_at_the_quota_and_nothing_is_left(tmp_path: Path) -> None:
    run = tmp_path / "sl-test"
    run.mkdir()
    world = run / "world"
    assert bound_world(world, 1024 * 1024)
    assert not filled(world, 1024 * 1024)
    with pytest.raises(OSError) as caught, open(world / "fill.bin", "wb") as fh:
        for _ in range(8):
            fh.write(b"\0" * (512 * 1024))
            fh.flush()
    assert caught.value.errno == 28  # ENOSPC, at the quota: the disk under it never saw the bytes
    assert filled(world, 1024 * 1024)
    remove_dir(run)
    assert not run.exists() and not _mounted(world)


def test_the_error_names_the_limit_and_is_not_retried() -> None:
    from grader.core.errors import BackendError, InfrastructureError

    exc = DiskQuotaExceeded()
    assert f"{WORLD_BYTES // (1024 * 1024)} MiB" in str(exc) and "disk quota" in str(exc)
    assert not isinstance(exc, (InfrastructureError, BackendError))  # never "rerun", never "no engine"


def test_a_directory_without_a_quota_is_removed_too(tmp_path: Path) -> None:
    (tmp_path / "run" / "world").mkdir(parents=True)
    remove_dir(tmp_path / "run")
    assert not (tmp_path / "run").exists()


@needs_root
def test_many_empty_files_fill_the_world_as_bytes_do(tmp_path: Path) -> None:
    """Empty files take no block, only the kernel's memory: the tmpfs counts them too, and a full count is seen."""
    world = tmp_path / "world"
    assert bound_world(world, 1024 * 1024)
    made = 0
    with pytest.raises(OSError) as caught:
        for made in range(WORLD_FILES + 1):
            (world / f"f{made}").touch()
    assert caught.value.errno == 28 and made < WORLD_FILES
    assert filled(world, 1024 * 1024)
    remove_dir(tmp_path)
    assert not _mounted(world)


@needs_root
def test_the_scratch_is_one_bound_for_all_its_directories(tmp_path: Path) -> None:
    run = tmp_path / "sl-test"
    run.mkdir()
    made = bound_scratch(run / "scratch", ("/var/tmp", "/run/lock"), 1024 * 1024)
    assert {d: p.name for d, p in made.items()} == {"/var/tmp": "var-tmp", "/run/lock": "run-lock"}
    assert all(p.stat().st_mode & 0o7777 == 0o1777 and p.stat().st_uid == 0 for p in made.values())  # as in the image
    with open(made["/var/tmp"] / "a", "wb") as fh:
        fh.write(b"\0" * (700 * 1024))
    assert not filled(run / "scratch", 1024 * 1024)
    with pytest.raises(OSError) as caught, open(made["/run/lock"] / "b", "wb") as fh:
        fh.write(b"\0" * (700 * 1024))  # the second directory has only what the first left
        fh.flush()
    assert caught.value.errno == 28 and filled(run / "scratch", 1024 * 1024)
    remove_dir(run)
    assert not run.exists() and not _mounted(run / "scratch")


@needs_root
def test_the_scratch_counts_files(tmp_path: Path) -> None:
    made = bound_scratch(tmp_path / "scratch", ("/var/tmp",), 1024 * 1024)
    with pytest.raises(OSError) as caught:
        for i in range(SCRATCH_FILES + 1):
            (made["/var/tmp"] / f"f{i}").touch()
    assert caught.value.errno == 28 and filled(tmp_path / "scratch", 1024 * 1024)
    remove_dir(tmp_path)
    assert not _mounted(tmp_path / "scratch")


def test_no_scratch_without_directories_or_where_nothing_can_be_mounted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert bound_scratch(tmp_path / "scratch", (), 1024 * 1024) == {}
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert bound_scratch(tmp_path / "scratch", ("/var/tmp",), 1024 * 1024) == {}
    assert not (tmp_path / "scratch").exists()


def test_the_scratch_error_names_its_directories_and_limit() -> None:
    exc = DiskQuotaExceeded(16 * 1024 * 1024, "the container's writable directories (/var/tmp, /run/lock)", SCRATCH_FILES)
    assert "16 MiB" in str(exc) and f"{SCRATCH_FILES} files" in str(exc) and "/var/tmp, /run/lock" in str(exc)
    assert "disk quota" in str(exc) and "not judged" in str(exc)
