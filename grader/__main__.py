"""``python -m grader``: the same as the ``sandbox-lab`` command."""

from __future__ import annotations

from grader.cli.main import entry

if __name__ == "__main__":
    entry()
