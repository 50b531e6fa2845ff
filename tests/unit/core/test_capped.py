"""A file someone names is read only when it is a regular file, and never past a limit (``grader/core/capped.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from endless import OFFERED, endless_pipe
from grader.core.capped import NotRegular, TooLarge, read_regular


def test_a_file_within_the_limit_is_read_whole_and_one_over_it_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_regular(f, 100) == b"x" * 100
    with pytest.raises(TooLarge, match="^larger than 99 bytes$") as info:
        read_regular(f, 99)
    assert info.value.limit == 99


def test_a_pipe_a_device_and_a_directory_are_refused_without_a_read_or_a_wait(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "silent")  # nobody writes: a blocking open would wait for ever
    for path, what in ((tmp_path / "silent", "a pipe or a device"), (Path("/dev/zero"), "a pipe or a device"),
                       (tmp_path, "a directory")):
        with pytest.raises(NotRegular) as info:
            read_regular(path, 10, follow=True)
        assert info.value.what == what
    with endless_pipe(tmp_path / "endless") as pipe:
        with pytest.raises(NotRegular):
            read_regular(pipe.path, 1 << 20, follow=True)
        taken = pipe.taken()
    assert taken <= 1 << 16 < OFFERED, taken  # at most what the pipe's buffer held: nothing was read from it


def test_a_link_is_followed_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"{}")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert read_regular(tmp_path / "link", 10, follow=True) == b"{}"
    for name in ("link", "dangling"):
        with pytest.raises(NotRegular, match="^a symbolic link$"):
            read_regular(tmp_path / name, 10)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "dangling", 10, follow=True)


def test_a_hard_link_is_refused_where_links_are_not_followed(tmp_path: Path) -> None:
    (tmp_path / "theirs").write_bytes(b"{}")
    os.link(tmp_path / "theirs", tmp_path / "mine")
    assert read_regular(tmp_path / "mine", 10, follow=True) == b"{}"  # a file the reader named itself
    for name in ("mine", "theirs"):  # two names of one file: neither tells which is the original
        with pytest.raises(NotRegular, match=r"^a hard link \(one of 2 names of the same file\)$"):
            read_regular(tmp_path / name, 10)


def test_a_path_relative_to_an_open_directory_is_read_there(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"here")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_regular("f", 10, dir_fd=fd) == b"here"
    finally:
        os.close(fd)
