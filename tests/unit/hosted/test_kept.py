"""The backends a worker keeps between jobs (``grader.hosted.kept``): reused while jobs succeed, closed with a job that
fails, rebuilt after a number of jobs, closed when idle or when the worker stops."""

from __future__ import annotations

from typing import Any

import pytest

from grader.hosted import kinds
from grader.hosted.kept import KeptBackends


class _Fake:
    """A backend that records whether it was closed."""

    made = 0

    def __init__(self, tenant_code: bool) -> None:
        _Fake.made += 1
        self.tenant_code, self.closed, self.number = tenant_code, False, _Fake.made

    def close(self) -> None:
        assert not self.closed, "a backend closed twice"
        self.closed = True


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _kept(**kw: Any) -> KeptBackends:
    return KeptBackends(_Fake, **kw)  # type: ignore[arg-type]


def test_one_backend_serves_job_after_job_and_tenant_code_gets_its_own() -> None:
    kept = _kept()
    with kept.lease() as a:
        pass
    with kept.lease() as b:
        pass
    with kept.lease(True) as c:
        pass
    assert a is b and c is not a and c.tenant_code and not a.tenant_code  # type: ignore[attr-defined]
    assert kept.made == 2 and kept.holding() == 2 and not a.closed  # type: ignore[attr-defined]


@pytest.mark.parametrize("error", [RuntimeError("engine gone"), KeyboardInterrupt(), SystemExit(1)])
def test_a_job_that_raises_closes_its_backend_and_the_next_job_gets_a_new_one(error: BaseException) -> None:
    """Fail closed: nothing a failed run left in a backend reaches the next job (a timeout, a cold stop, a bug)."""
    kept = _kept()
    with pytest.raises(type(error)):
        with kept.lease() as first:
            raise error
    assert first.closed and kept.holding() == 0  # type: ignore[attr-defined]
    with kept.lease() as second:
        pass
    assert second is not first and not second.closed  # type: ignore[attr-defined]


def test_a_failing_close_after_a_failed_job_raises_the_jobs_error_not_the_close() -> None:
    class _Stuck(_Fake):
        def close(self) -> None:
            raise OSError("the engine went away")

    kept = KeptBackends(_Stuck)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the run's own"):
        with kept.lease():
            raise ValueError("the run's own error")


def test_a_backend_is_rebuilt_after_its_quota_of_jobs() -> None:
    kept = _kept(rebuild_after=3)
    used = []
    for _ in range(7):
        with kept.lease() as b:
            used.append(b)
    assert [u.number for u in used] == [used[0].number] * 3 + [used[3].number] * 3 + [used[6].number]  # type: ignore[attr-defined]
    assert used[0].closed and used[3].closed and not used[6].closed  # type: ignore[attr-defined]


def test_idle_backends_are_closed_but_never_one_in_use() -> None:
    clock = _Clock()
    kept = _kept(idle_seconds=10, clock=clock)
    with kept.lease() as b:
        clock.now = 100
        assert not kept.retire_idle(), "a backend in use was retired"
    clock.now = 105
    assert not kept.retire_idle()  # used 5 s ago
    clock.now = 111
    assert kept.retire_idle() and b.closed and kept.holding() == 0  # type: ignore[attr-defined]
    assert not kept.retire_idle()  # nothing left to retire


def test_closing_closes_every_kept_backend() -> None:
    kept = _kept()
    with kept.lease() as a, kept.lease(True) as c:  # nested in one thread (a job's grade, then its attack): no deadlock
        pass
    kept.close()
    assert a.closed and c.closed and kept.holding() == 0  # type: ignore[attr-defined]


def test_jobs_use_the_kept_backends_only_while_a_worker_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kinds.BACKEND_ENV, "static")
    kept = KeptBackends(kinds.new_backend)
    kinds.keep_backends(kept)
    try:
        with kinds.worker_backend() as one:
            pass
        with kinds.worker_backend() as two:
            pass
        assert one is two and kept.made == 1
    finally:
        kinds.keep_backends(None)
    with kinds.worker_backend() as fresh:
        assert fresh is not one
