"""A file someone names is read up to a limit and no further (``grader/core/capped.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from endless import OFFERED, endless_pipe
from grader.core.capped import TooLarge, read_capped


def test_a_file_within_the_limit_is_read_whole_and_one_over_it_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_capped(f, 100) == b"x" * 100
    with pytest.raises(TooLarge, match="^larger than 99 bytes$") as info:
        read_capped(f, 99)
    assert info.value.limit == 99


def test_a_pipe_that_never_ends_is_read_only_one_byte_past_the_limit_plus_the_pipe_s_buffer(tmp_path: Path) -> None:
    with endless_pipe(tmp_path / "fifo") as pipe:
        with pytest.raises(TooLarge):
            read_capped(pipe.path, 1 << 20)
        taken = pipe.taken()
    # a read of the whole would have taken all it was offered; a bounded one takes the limit and a pipe buffer
    assert taken < (1 << 20) + (1 << 20) < OFFERED, taken


def test_what_cannot_be_opened_is_the_operating_system_s_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_capped(tmp_path / "missing", 10)
    with pytest.raises(IsADirectoryError):
        read_capped(tmp_path, 10)
