"""Choosing a backend: ``get(name)`` for an explicit choice, ``default()`` for "the best one that works here".

Five names: ``static`` (the analyzer's predictions, always available),
``docker`` (real containers; needs an engine that answers), ``srt`` (the real
sandbox-runtime, to cross-check; needs scripts/ensure-srt), ``remote`` (real
containers on the run service that ``SANDBOX_LAB_SERVICE_URL`` names; where it
cannot run a plan, the static prediction with a notice saying so) and ``auto``
(docker when an engine answers, otherwise static with a notice saying the
result was predicted, not run). A backend is a value the caller passes on; this
module keeps none.

The Docker backend is imported lazily, inside ``get``: importing ``grader`` or
using the static backend must work on a machine (e.g. Binder) where the
``docker`` SDK or the engine is missing.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, cast

from grader.core.errors import DockerUnavailable

if TYPE_CHECKING:
    from grader.backends.base import Backend
    from grader.backends.static import StaticBackend
    from grader.core.outcomes import RunNoteCode

__all__ = ["BACKEND_ENV", "BACKEND_NAMES", "Backend", "StaticBackend", "default", "docker_module", "get"]

BACKEND_NAMES = ("static", "docker", "auto", "srt", "remote")
BACKEND_ENV = "SANDBOX_LAB_BACKEND"  # overrides the name ``default()`` starts from

Progress = Callable[[str], object]  # the return value, if any, is ignored


def __getattr__(name: str) -> Any:
    # the re-exports load on first use: the command line parses its arguments without the analyzer behind them
    if name == "Backend":
        from grader.backends.base import Backend

        return Backend
    if name == "StaticBackend":
        from grader.backends.static import StaticBackend

        return StaticBackend
    raise AttributeError(f"module 'grader.backends' has no attribute {name!r}")


def docker_module() -> ModuleType:
    """``grader.backends.docker.backend``, or ``DockerUnavailable`` naming the install command when the SDK is missing."""
    try:
        return importlib.import_module("grader.backends.docker.backend")
    except ImportError as exc:
        if exc.name == "docker" or (exc.name or "").startswith("docker."):
            # the docker SDK is an extra: a static-only install (pip install . in a checkout) has none
            from grader.protocol.common import install_hint

            raise DockerUnavailable(f"the Python package 'docker' is not installed; {install_hint('docker')}") from None
        if exc.name == "grader.backends.docker.backend":
            raise DockerUnavailable("this version of Sandbox Lab has no Docker backend") from None
        raise


def _docker(progress: Optional[Progress], shared: bool = False, runtime: Optional[str] = None) -> Backend:
    module = docker_module()
    cls = module.DockerBackend
    # A terminal's command, its warm engine and a kernel (``default``) share the machine's simulated
    # internet and warm proxies (``hub``); a batch keeps its own unless $SANDBOX_LAB_SHARED_IDLE asks
    # for sharing everywhere.
    idle = module.idle_seconds() if shared else None  # None: the backend's own, unless the environment asks
    backend = (cls.from_env(shared_idle=idle, runtime=runtime) if progress is None
               else cls.from_env(progress, shared_idle=idle, runtime=runtime))
    return cast("Backend", backend)


def _static(notice: str = "", cause: Optional[RunNoteCode] = None) -> Backend:
    from grader.backends.static import StaticBackend

    # cast: Backend declares ``name`` as a plain attribute, StaticBackend (frozen) as a read-only one
    return cast("Backend", StaticBackend(notice=notice, cause=cause))


def _reason(exc: DockerUnavailable) -> str:
    """The short cause inside a DockerUnavailable (its ``detail``, typed), for the static fallback's notice; with
    none, the message's first sentence."""
    return exc.detail or str(exc).split(". ")[0]


def get(name: str, *, progress: Optional[Progress] = None, shared: bool = False, runtime: Optional[str] = None) -> Backend:
    """The backend called ``name`` (``static``, ``docker``, ``srt``, ``remote`` or ``auto``).

    ``docker`` raises ``DockerUnavailable`` when no engine answers; ``auto``
    never does: it falls back to the static backend, whose results then carry
    the notice "predicted, not run: no Docker engine answers (<reason>)".

    Args:
        progress: called with one line per step while the Docker backend
            prepares (building images can take a minute the first time).
        shared: the caller is a one-shot process: the Docker backend adopts
            the machine's shared simulated internet (``backends.docker.hub``), which
            outlives it for an idle period, instead of starting its own.
        runtime: the OCI runtime the Docker backend's sandboxes run under (e.g.
            ``runsc``); None: ``SANDBOX_LAB_RUNTIME``, else the engine's default.
            It reaches the Docker backend (``docker``, or ``auto`` when an engine
            answers); the others run no container of their own and ignore it.
    """
    key = name.strip().lower()
    if key == "static":
        return _static()
    if key == "docker":
        return _docker(progress, shared, runtime)
    if key == "srt":
        # the real sandbox-runtime, for cross-checking what Sandbox Lab teaches (Linux, bubblewrap)
        from grader.backends.srt import SrtBackend

        return SrtBackend.from_env()
    if key == "remote":
        # the run service (docs/service-api.md): a real sandbox for a learner without an engine
        from grader.backends.remote import RemoteBackend

        return cast("Backend", RemoteBackend.from_env())
    if key == "auto":
        try:
            return _docker(progress, shared, runtime)
        except DockerUnavailable as exc:
            return _static(f"predicted, not run: no Docker engine answers ({_reason(exc)})", "no-engine")
    raise ValueError(f"unknown backend {name!r}; choose one of: {', '.join(BACKEND_NAMES)}")


def default(*, prefer: str = "auto", progress: Optional[Progress] = None, shared: bool = True) -> Backend:
    """The backend to use when the caller did not choose: ``prefer``, unless ``SANDBOX_LAB_BACKEND`` names another.

    Notebooks call this: on Binder (no engine) it gives the static backend,
    and every result says it was predicted. With an engine, the Docker backend
    adopts the machine's hub (``shared``, as a terminal's commands and its warm
    engine do): a kernel starts no simulated internet or proxies of its own, so
    one machine runs one internet and one pool of warm proxies for all of them.
    """
    name = os.environ.get(BACKEND_ENV, "").strip() or prefer
    if os.environ.get("NBGRADER_EXECUTION") == "autograde" and not os.environ.get(BACKEND_ENV, "").strip():
        # Inside nbgrader autograde the learner's kernel only shows feedback; the score is
        # computed by the grader's own process (grader/grading/autograde.py). No Docker run here.
        name = "static"
    return get(name, progress=progress, shared=shared)
