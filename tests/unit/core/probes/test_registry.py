"""The probe registry: every channel family's records are in ``PROBES``, in the order every report shows.

A probe on a new channel is a module of its own in ``grader/core/probes/`` and
its entry in ``registry.PROBES``; a module whose records never reach the
registry would be a probe that never runs, so it fails here.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import grader.core.probes as probes
from grader.core.probes import PROBES, Probe, probe
from grader.core.probes.registry import PROBES as REGISTERED

PACKAGE = Path(probes.__file__).parent
NOT_CHANNELS = {"__init__", "record", "registry", "scan"}  # the record, the catalogue, the package, the scope scan
CHANNELS = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in NOT_CHANNELS)


def test_the_package_serves_the_registrys_one_catalogue() -> None:
    """The order itself is pinned where it shows: every report golden (tests/fixtures/goldens/naive-static.*)."""
    assert PROBES is REGISTERED


def test_ids_are_unique_slugs_and_found_by_id() -> None:
    assert len({p.id for p in PROBES}) == len(PROBES)
    for p in PROBES:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", p.id), p.id  # valid as an nbgrader grade_id
        assert probe(p.id) is p
    with pytest.raises(KeyError):
        probe("no-such-probe")


@pytest.mark.parametrize("channel", CHANNELS)
def test_every_channel_module_is_registered(channel: str) -> None:
    """Each channel module carries out some registered probe, and every record it defines is registered."""
    module = importlib.import_module(f"grader.core.probes.{channel}")
    name = module.__name__
    assert any(p.orders.__module__ == name for p in PROBES), (
        f"no probe of {name} is in PROBES: add its records to grader/core/probes/registry.py")
    defined = [v for v in vars(module).values() if isinstance(v, Probe)]
    assert all(p in PROBES for p in defined), f"{name} defines records PROBES lacks: {[p.id for p in defined if p not in PROBES]}"


def test_the_package_re_exports_the_public_api() -> None:
    assert sorted(probes.__all__) == sorted(
        ["PROBES", "SCAN_WIDTH", "OrderContext", "Probe", "ProbeKind", "Step", "orders_for", "probe", "scan_orders"])
    assert all(hasattr(probes, n) for n in probes.__all__)
