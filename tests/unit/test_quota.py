"""The disk one run may write (grader/backends/quota.py): a tmpfs of a fixed size over the world copy, removed with it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from grader.backends.quota import WORLD_BYTES, DiskQuotaExceeded, bound_world, filled, remove_dir

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
