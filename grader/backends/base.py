"""The ``Backend`` protocol: anything that turns a ``RunPlan`` into a ``RunResult``, and lets go of what it holds when closed.

Modelled on httpx's transports: one small protocol, a pure implementation
(``static``) and real ones (``docker``, ``srt``) behind it, chosen by the
caller and passed in, never kept in a global. Whoever creates a backend closes
it, most simply with ``with backends.get(name) as backend:``.
"""

from __future__ import annotations

from types import TracebackType
from typing import Optional, Protocol, TypeVar, runtime_checkable

from grader.core.execution import Execution, Job
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan

__all__ = ["Backend", "Closing"]

_C = TypeVar("_C", bound="Closing")


@runtime_checkable
class Backend(Protocol):
    """Runs the probes of a plan against the sandbox the plan describes."""

    @property
    def name(self) -> str:
        """Which backend produced a result: "static", "docker", ..."""
        ...

    def run(self, plan: RunPlan) -> RunResult:
        """Run every probe of ``plan``; a failed probe is an ``error`` outcome, not an exception."""
        ...

    def execute(self, plan: RunPlan, job: Job) -> Execution:
        """Run ``job``'s code in the sandbox of ``plan`` instead of the probes; ``BackendError`` where
        the backend cannot run code (the static backend only predicts)."""
        ...

    def close(self) -> None:
        """Let go of what the backend keeps between runs (containers, networks, directories); safe to call twice."""
        ...

    def __enter__(self) -> Backend:
        ...

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        ...


class Closing:
    """``with backend:`` for every backend: the backend itself on the way in, ``close()`` on the way out."""

    def close(self) -> None:
        """Nothing to let go of; backends that keep something between runs override this."""

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
