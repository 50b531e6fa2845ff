"""The ``sandbox-lab`` console script and ``python -m grader``: a command for the warm engine is handed before the rest
of the command line is imported.

``cli.main`` imports the parser, the backends' registry and the terminal's
helpers (about 20 ms of a handed command's 60). A command the engine serves
needs none of them: this module imports ``cli.client`` alone (the standard
library and the package's root), hands the command, and only when it runs here
(no engine, or one that could not finish it) imports ``cli.main``.
"""

from __future__ import annotations

import sys

from grader.cli import client

TYPE_CHECKING = False  # typing's own, without importing typing on a handed command's path (mypy reads the name)
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["entry"]


def entry() -> NoReturn:
    """Hand ``sys.argv`` to the warm engine and exit with its code (``client.exit_if_handed``); else ``main.run_here``."""
    argv = sys.argv[1:]
    client.exit_if_handed(argv)
    from grader.cli.main import run_here

    run_here(argv)
