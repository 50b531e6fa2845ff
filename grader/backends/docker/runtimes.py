"""Which OCI runtime a sandbox runs under: the engine's default (runc), or one it has registered, such as gVisor's runsc.

The operator's choice, never a policy's: ``SANDBOX_LAB_RUNTIME=runsc`` (or
``DockerBackend(..., runtime="runsc")``) runs every sandbox container (the
probes, a learner's attack code, the next sessions of a replay) under that
runtime, so a kernel bug reached from the sandbox meets gVisor's kernel, not
the host's. The services (internet, proxy, listener) are the project's own
code and stay on the engine's default. ``scripts/ensure-docker --runtime runsc``
installs and registers runsc (docs/scaling.md, "Sandbox runtime (gVisor)").

Fail closed: a runtime asked for that the engine does not know is an error
naming it, the runtimes the engine has and the fix, checked once when the
backend is made; never a run quietly under runc.

Imports: engine, core.errors.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional

from grader.core.errors import BackendError
from grader.backends.docker.engine import engine_errors

__all__ = ["RUNTIME_ENV", "RuntimeUnavailable", "check_runtime", "runtime_from_env", "sandbox_runtime"]

RUNTIME_ENV = "SANDBOX_LAB_RUNTIME"
# what dockerd accepts as a runtime's name in daemon.json; anything else is a typo or an injection, refused
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class RuntimeUnavailable(BackendError):
    """The runtime asked for is not one the Docker engine has registered: no sandbox is started."""


def runtime_from_env(env: Mapping[str, str]) -> Optional[str]:
    """The runtime ``SANDBOX_LAB_RUNTIME`` asks for; None when it is unset or empty (the engine's default)."""
    value = env.get(RUNTIME_ENV, "").strip()
    if not value:
        return None
    if not _NAME.fullmatch(value):
        raise RuntimeUnavailable(
            f"{RUNTIME_ENV}={value!r} is not a runtime's name: use a name the engine registered, e.g. runsc, "
            f"or unset {RUNTIME_ENV} for the engine's default"
        )
    return value


def check_runtime(name: Optional[str], registered: Iterable[str]) -> Optional[str]:
    """``name`` if the engine has it (None: the engine's default, always there); else ``RuntimeUnavailable``."""
    if name is None:
        return None
    known = sorted(registered)
    if name not in known:
        raise RuntimeUnavailable(
            f"sandboxes are to run under the runtime {name!r} ({RUNTIME_ENV} or the backend's settings), "
            f"but the Docker engine has no runtime of that name (it has: {', '.join(known) or 'none listed'}). "
            + ("Register gVisor with `sudo scripts/ensure-docker --runtime runsc`, or unset "
               if name == "runsc" else "Register it in /etc/docker/daemon.json (\"runtimes\"), or unset ")
            + f"{RUNTIME_ENV} to use the engine's default."
        )
    return name


def sandbox_runtime(client: Any, name: Optional[str]) -> Optional[str]:
    """``name`` once the engine behind ``client`` is seen to have it registered (None: nothing to check)."""
    if name is None:
        return None
    with engine_errors("reading the engine's runtimes"):
        info = client.info()
    return check_runtime(name, (info.get("Runtimes") or {}).keys())
