"""``python -m grader``: the same as the ``sandbox-lab`` command."""

from __future__ import annotations

from grader.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
