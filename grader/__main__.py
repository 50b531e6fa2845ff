"""``python -m grader``: the same as the ``sandbox-lab`` command."""

from __future__ import annotations

from grader.cli.launch import entry

if __name__ == "__main__":
    entry()
