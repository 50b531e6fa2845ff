"""tests/unit/ mirrors grader/, one folder per package; a test may still import a helper from another folder's test
module by its name (``from test_prestart import Engine``), whichever folder pytest collected first."""

from __future__ import annotations

import sys
from pathlib import Path

for _folder in sorted(p for p in Path(__file__).resolve().parent.rglob("*") if p.is_dir() and p.name != "__pycache__"):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
