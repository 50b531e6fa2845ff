"""A class of 1,000 through ``grade_batch`` with the Docker backend: every row, nothing left behind, flat memory.

Classes submit many identical policies, so the 1,000 files are a few distinct
policies written many ways (key order, indentation) plus broken files of every
kind. Deduplication grades each distinct policy once, which keeps this test to
well under a minute while the grader still reads, validates, journals and
reports 1,000 submissions.
"""

from __future__ import annotations

import csv
import gc
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from grader.backends.docker.backend import DockerBackend
from grader.backends.docker.engine import DockerEngine
from grader.backends.static import StaticBackend
from grader.grading.batch import grade_batch
from grader.grading.tasks import load_task

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CORPUS: dict[str, Any] = json.loads((Path(__file__).parent.parent / "fixtures" / "corpus.json").read_text())["policies"]
DISTINCT = ("seed-naive", "seed-secure", "fix-naive-solution", "practice-solution", "empty-policy", "write-everything",
            "deny-every-data-root", "github-apex", "pypi-download", "npm-wildcard", "stop-persistence", "naive-plus-secrets-hidden")
BROKEN: tuple[bytes, ...] = (
    b"", b"   \n", b"{", b"[]", b"null", b'{"filesystem": {"allowWrites": ["/tmp"]}}', b'{"a": NaN}',
    b'{"network": {}, "network": {}}', b"\xff\xfe\x00\x00not utf-8", b'{"filesystem": {"allowWrite": ["~root/x"]}}',
    b'{"network": {"allowedDomains": ["*"]}}', b'{"filesystem": {"allowRead": ["/a\\u0000b"]}}',
    b"[" * 5000, b'{"network": {"allowedDomains": ["' + b"a" * 300 + b'.com"]}}',
    b'{"filesystem": {"allowWrite": ' + json.dumps(["/p%d" % i for i in range(1500)]).encode() + b"}}",
    b" " * 1_000_001,
)
STUDENTS = 1000
MEMORY_GROWTH_LIMIT = 100 * 1024 * 1024  # the first 1,000 rows (feedback included): about 30 MiB measured
REPEAT_GROWTH_LIMIT = 20 * 1024 * 1024  # the same class twice again, past the highest before: a leak of over 10 MiB a class fails by the second


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _reorder(d: Any, rng: random.Random) -> Any:
    """The same policy, keys in another order: a student's own way of writing it."""
    if isinstance(d, dict):
        items = list(d.items())
        rng.shuffle(items)
        return {k: _reorder(v, rng) for k, v in items}
    return d


def _write_class(folder: Path, n: int, seed: int = 7) -> tuple[int, dict[str, str]]:
    """``n`` submissions; returns how many are broken, and each valid student's corpus policy name."""
    rng = random.Random(seed)
    folder.mkdir()
    which: dict[str, str] = {}
    broken = 0
    for i in range(n):
        student = f"student{i:04d}"
        if i % 25 == 3:  # 4% broken, every kind in turn
            (folder / f"{student}.json").write_bytes(BROKEN[broken % len(BROKEN)])
            broken += 1
            continue
        name = DISTINCT[rng.randrange(len(DISTINCT))]
        text = json.dumps(_reorder(CORPUS[name], rng), indent=rng.choice([None, 2, 4]))
        (folder / f"{student}.json").write_text(text + "\n" * rng.randrange(2), encoding="utf-8")
        which[student] = name
    return broken, which


def test_a_class_of_1000_leaves_nothing_behind_and_keeps_memory_flat(
    docker_client: Any, docker_backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leftovers: None
) -> None:
    runs = tmp_path / "runs"
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(runs))  # an empty place of our own: anything left there is ours
    task = load_task("fix-the-naive-setup")
    folder = tmp_path / "class"
    n_broken, which = _write_class(folder, STUDENTS)
    backend = DockerBackend(DockerEngine(docker_client), docker_backend.images)  # its own: whatever it keeps between runs goes with it
    try:
        warm_folder = tmp_path / "warm"
        _write_class(warm_folder, 40, seed=1)
        grade_batch(task, warm_folder, backend, workers=4)  # imports, caches and thread pools exist before we measure
        before = _rss()
        peak = [before]

        def progress(done: int, total: int) -> None:
            if done % 50 == 0 or done == total:
                peak[0] = max(peak[0], _rss())

        book = grade_batch(task, folder, backend, workers=4, out=tmp_path / "out", progress=progress)
        after = _rss()
        # The gradebook itself holds 1,000 rows of feedback; grading the class again must not grow the grader further.
        # Measured against the highest the grader had been before, and summed over the repeats: the allocator hands
        # freed pages back to the system at times of its own (CI saw one repeat at -35 MiB and the next at +33 MiB, a
        # drop and its return), and a leak is what stays above that mark and grows with every repeat.
        high = max(peak[0], after)
        repeats = []
        for i in range(2):
            grade_batch(task, folder, backend, workers=4, out=tmp_path / f"again{i}")
            gc.collect()
            repeats.append(_rss() - high)
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()

    assert len(book.rows) == STUDENTS and len({r.student for r in book.rows}) == STUDENTS
    counts = book.counts()
    too_big = sum(1 for f in folder.iterdir() if f.stat().st_size > 1_000_000)  # refused unread: an error row
    assert too_big > 0 and counts == {"ok": STUDENTS - n_broken, "invalid": n_broken - too_big, "error": too_big,
                                      "full_marks": counts["full_marks"]}, counts
    assert book.runs <= len(DISTINCT), book.runs  # graded once per distinct policy
    with (tmp_path / "out" / "gradebook.csv").open(newline="", encoding="utf-8") as fh:
        assert len(list(csv.reader(fh))) == STUDENTS + 1  # feedback spans lines: count records, not lines
    assert len(json.loads((tmp_path / "out" / "gradebook.json").read_text())["rows"]) == STUDENTS
    # every copy of one policy got the same grade, and it is the static prediction's
    static = {r.student: r for r in grade_batch(task, folder, StaticBackend(), workers=1).rows}
    by_policy: dict[str, set[int]] = {}
    for r in book.rows:
        assert (r.score, r.status) == (static[r.student].score, static[r.student].status), (r.student, r.feedback)
        if r.student in which:
            by_policy.setdefault(which[r.student], set()).add(r.score)
    assert all(len(scores) == 1 for scores in by_policy.values()), by_policy

    leftovers = sorted(os.listdir(runs)) if runs.exists() else []
    assert leftovers == [], f"run directories left behind: {leftovers[:10]}"
    growth = max(peak[0], after) - before
    assert growth < MEMORY_GROWTH_LIMIT, f"the grader grew by {growth / 2**20:.0f} MiB over 1,000 submissions"
    assert all(r < REPEAT_GROWTH_LIMIT for r in repeats), [f"{r / 2**20:.1f} MiB" for r in repeats]
