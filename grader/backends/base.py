"""The ``Backend`` protocol: anything that turns a ``RunPlan`` into a ``RunResult``.

Modelled on httpx's transports: one small protocol, a pure implementation
(``static``) and a real one (``docker``) behind it, chosen by the caller and
passed in, never kept in a global.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..outcomes import RunResult
from ..plan import RunPlan

__all__ = ["Backend"]


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
