"""Every kernel the tests start talks over Unix sockets in a directory of its own, never over TCP ports.

jupyter_client's default transport picks a kernel's five ports by binding
port 0 and closing the socket, and the kernel binds them again a moment later:
in between, anything else on the machine (another test run's kernel, an
``nbgrader autograde`` in another test, a container's published port) can take
one, and the kernel dies with ``ZMQError: Address already in use`` (seen in
``test_capture_task_on_the_static_backend...`` under load). Over the ``ipc``
transport a kernel's channels are socket files under a prefix in a directory
made for it alone, so no two kernels can meet, whoever else runs here.

``execute`` runs a notebook in this process (nbclient), one directory per
kernel; ``client_config`` is the same as source, for a runner another
interpreter executes (a fresh venv's nbclient). ``environment`` gives a subprocess that starts kernels (``nbgrader
autograde``, ``jupyter nbconvert --execute``) a Jupyter config directory, first
on ``JUPYTER_CONFIG_PATH``, whose ``jupyter_config.json`` says the same: one
directory per subprocess, whose kernels run one after another (each picks the
first socket names not taken in it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["client_config", "environment", "execute", "settings"]

# A Unix socket's path holds at most 107 bytes: the directory lives in /tmp, not under a long pytest tmp_path.
_SHORT_TMP = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()


@contextmanager
def _socket_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="slk-", dir=_SHORT_TMP)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def settings(socket_dir: str) -> dict[str, Any]:
    """The Jupyter config that puts a kernel's channels on ``ipc`` under ``socket_dir``.

    ``ip`` is the sockets' path prefix (``<dir>/k-1`` ... ``<dir>/k-5``); left to its default, a manager with no
    connection file names them ``kernel-ipc-N`` relative to its own working directory, which the kernel (started
    in the notebook's) does not share.
    """
    prefix = os.path.join(socket_dir, "k")
    assert len(prefix) + 4 < 100, f"a Unix socket path must stay under 108 bytes: {prefix}"
    return {"KernelManager": {"transport": "ipc", "ip": prefix}}


def execute(nb: Any, cwd: Path, *, timeout: int = 600) -> Any:
    """Run ``nb`` top to bottom in a fresh python3 kernel started in ``cwd``, over ipc; the notebook, with outputs.

    Errors in cells are left in the outputs, for the caller to judge; a kernel that cannot start raises.
    """
    import nbclient
    from traitlets.config import Config

    with _socket_dir() as d:
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                         resources={"metadata": {"path": str(cwd)}}, config=Config(settings(d)))
        km = client.create_kernel_manager()  # the one execute() starts its kernel with (it owns it, and shuts it down)
        assert km.transport == "ipc" and km.ip.startswith(d), f"the kernel would listen on {km.transport}://{km.ip}"
        client.execute()
    return nb


@contextmanager
def client_config() -> Iterator[str]:
    """A Python expression for ``NotebookClient(..., config=<it>)`` in code another interpreter runs: its kernels
    (one after another) on ipc in a directory of their own, removed when the block ends."""
    with _socket_dir() as d:
        yield f"__import__('traitlets.config', fromlist=['Config']).Config({settings(d)!r})"


@contextmanager
def environment(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """``env`` for a subprocess that starts kernels, one after another: its kernels use ipc in a directory of its own.

    Every Jupyter application (nbgrader, nbconvert) reads ``jupyter_config.json`` from each directory on
    ``JUPYTER_CONFIG_PATH``; the caller's own entries stay, after this one.
    """
    with _socket_dir() as d:
        config_dir = Path(d, "config")
        config_dir.mkdir()
        (config_dir / "jupyter_config.json").write_text(json.dumps(settings(d)), encoding="utf-8")
        rest = env.get("JUPYTER_CONFIG_PATH", "")
        yield {**env, "JUPYTER_CONFIG_PATH": os.pathsep.join([str(config_dir), *([rest] if rest else [])])}
