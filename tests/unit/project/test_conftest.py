"""What tests/conftest.py assumes of the libraries it changes for the tests' sake."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

IRI_FORMATS = {"iri", "iri-reference"}


def _formats(value: object) -> set[str]:
    if isinstance(value, dict):
        found = {value["format"]} if isinstance(value.get("format"), str) else set()
        return found.union(*(_formats(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_formats(v) for v in value))
    return set()


def test_rfc3987_syntax_is_left_out_and_no_notebook_schema_has_a_format_it_checks() -> None:
    """The tests leave out rfc3987-syntax (1.8 s of imports in each test process). It only checks the "iri" and
    "iri-reference" formats of a JSON schema: no nbformat schema (every notebook the tests read or write is
    validated against one) uses them, so leaving it out changes no validation the tests make."""
    nbformat = pytest.importorskip("nbformat", reason="the notebook stack is in the 'lab' extra")
    assert "rfc3987_syntax" in sys.modules and sys.modules["rfc3987_syntax"] is None
    with pytest.raises(ImportError):
        import rfc3987_syntax  # noqa: F401
    schemas = sorted(Path(nbformat.__file__).parent.glob("v*/*.schema.json"))
    assert schemas, "nbformat ships its schemas"
    used = set().union(*(_formats(json.loads(p.read_text())) for p in schemas))
    assert not used & IRI_FORMATS, used
