"""The lock, constraints/test.txt, against every Python that pyproject.toml's requires-python admits.

A pin whose release needs a newer Python than the oldest one supported breaks `make lab` for a user who
has that older one: soupsieve 4.1.3 needs Python 3.11.5, a stock Debian 12's python3 is 3.11.2, and pip
stopped with ResolutionImpossible (issue 37). `make lock` now resolves for the oldest supported Python and
every newer one (uv, --universal), pinning an older release behind a python_full_version marker where the
newest needs a newer Python. These tests hold it to that, offline: a pin's own Requires-Python is only in
its metadata, so it is read from the installed distributions, for every pin whose marker applies to the
Python running the tests (those are the ones installed); the others are checked on a Python they apply to.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # the lock pins tomli for Python 3.10 (mypy and pytest need it there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[3]
LOCK = ROOT / "constraints" / "test.txt"

# The Pythons a marker or a Requires-Python is evaluated at: every minor from the minimum up to two past
# the running one, every micro up to 30 (bounds such as soupsieve's >=3.11.5 fall on a micro release).
_MICROS = range(31)


@dataclass(frozen=True)
class Pin:
    """One line of the lock: a distribution, its version, and the marker that selects it (None: always)."""

    line: str
    name: str
    version: str
    marker: Marker | None


def _minimum_python() -> Version:
    """The oldest Python the project supports: the lower bound of requires-python in pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        requires = SpecifierSet(tomllib.load(f)["project"]["requires-python"])
    bounds = [Version(s.version) for s in requires if s.operator in (">=", "~=", "==")]
    assert bounds, f"requires-python {str(requires)!r} has no lower bound: the lock needs one to resolve for"
    return min(bounds)


def _parse_lock(text: str) -> list[Pin]:
    """Every pin of a lock file, strictly: a line that is not `name==version [; marker]` fails the test."""
    pins = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==" and not req.extras and req.url is None, (
            f"{LOCK.name}: {line!r} is not a pin (name==version, with an optional marker)"
        )
        pins.append(Pin(line, canonicalize_name(req.name), specs[0].version, req.marker))
    return pins


def _pythons(minimum: Version) -> list[Version]:
    """The Python releases a lock must serve, from the minimum up (see _MICROS)."""
    top = max(sys.version_info[1], minimum.minor) + 2
    return [
        Version(f"{minimum.major}.{minor}.{micro}")
        for minor in range(minimum.minor, top + 1)
        for micro in _MICROS
        if Version(f"{minimum.major}.{minor}.{micro}") >= minimum
    ]


def _selects(pin: Pin, python: Version) -> bool:
    """Whether pip, on this machine but with Python `python`, would apply this pin."""
    if pin.marker is None:
        return True
    env = {"python_version": f"{python.major}.{python.minor}", "python_full_version": str(python)}
    return pin.marker.evaluate(env)


def _applies_here(pin: Pin) -> bool:
    return pin.marker is None or pin.marker.evaluate()


def requires_python_problems(
    pins: Iterable[Pin], minimum: Version, requires_python: Callable[[str], str | None]
) -> list[str]:
    """The pins that pip would pick for a Python their own release does not support.

    For each pin, every Python from `minimum` up that its marker selects must be one its Requires-Python
    admits. `requires_python(name)` is the installed distribution's Requires-Python (None: any).
    """
    problems = []
    pythons = _pythons(minimum)
    for pin in pins:
        spec = requires_python(pin.name)
        if spec is None:
            continue
        admitted = SpecifierSet(spec)
        refused = [p for p in pythons if _selects(pin, p) and not admitted.contains(p)]
        if refused:
            problems.append(
                f"{pin.line}: its release requires Python {spec}, yet pip picks it on Python {refused[0]}"
                f"{f' to {refused[-1]}' if len(refused) > 1 else ''}, which requires-python (>={minimum}) supports"
            )
    return problems


def _installed_requires_python(name: str) -> str | None:
    return metadata.distribution(name).metadata["Requires-Python"]


def _lock_pins() -> list[Pin]:
    return _parse_lock(LOCK.read_text(encoding="utf-8"))


def test_lock_was_made_for_the_oldest_supported_python() -> None:
    """Its header says how it was made, and for the Python requires-python starts at."""
    header = [line for line in LOCK.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert any(f"--python-version {_minimum_python()}" in line for line in header), (
        f"{LOCK.name} was not made for Python {_minimum_python()}, the oldest requires-python admits: run `make lock`"
    )


def test_each_python_gets_one_pin_per_distribution() -> None:
    """Pins of one distribution behind python_full_version markers split the Pythons; they never overlap."""
    pins = _lock_pins()
    by_name: dict[str, list[Pin]] = {}
    for pin in pins:
        by_name.setdefault(pin.name, []).append(pin)
    overlaps = [
        f"{name} on Python {python}: {' and '.join(p.line for p in chosen)}"
        for name, group in by_name.items()
        if len(group) > 1
        for python in _pythons(_minimum_python())
        if len(chosen := [p for p in group if _selects(p, python)]) > 1
    ]
    assert not overlaps, "pins that overlap:\n  " + "\n  ".join(overlaps)


def test_pins_that_apply_here_are_what_is_installed() -> None:
    """The environment the tests run in is the lock's: each pin whose marker applies is installed at its version."""
    wrong = []
    for pin in filter(_applies_here, _lock_pins()):
        try:
            installed = metadata.version(pin.name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{pin.line}: not installed")
            continue
        if Version(installed) != Version(pin.version):
            wrong.append(f"{pin.line}: {installed} is installed")
    assert not wrong, (
        f"this environment ({sys.executable}) is not the one {LOCK.name} pins; `make venv` installs it:\n  "
        + "\n  ".join(wrong)
    )


def test_every_pin_supports_every_python_it_is_picked_for() -> None:
    """No pin that applies here needs a newer Python than the oldest its marker lets pip pick it for."""
    pins = [pin for pin in _lock_pins() if _applies_here(pin)]
    problems = requires_python_problems(pins, _minimum_python(), _installed_requires_python)
    assert not problems, (
        f"{LOCK.name} breaks `make venv` on a supported Python; `make lock` resolves for all of them:\n  "
        + "\n  ".join(problems)
    )


@pytest.mark.parametrize(
    ("line", "requires", "caught"),
    [
        # issue 37: the lock made by pip freeze on Python 3.11.7; Debian 12's python3 is 3.11.2
        ("soupsieve==4.1.3", ">=3.11.5", True),
        ("soupsieve==4.1.3 ; python_full_version >= '3.11.5'", ">=3.11.5", False),
        ("soupsieve==4.1.3 ; python_full_version >= '3.11'", ">=3.11.5", True),
        ("numpy==2.2.6 ; python_full_version < '3.11'", ">=3.10", False),
        ("six==1.17.0", ">=2.7, !=3.0.*, !=3.1.*, !=3.2.*", False),
    ],
)
def test_the_check_catches_a_pin_a_supported_python_cannot_install(line: str, requires: str, caught: bool) -> None:
    (pin,) = _parse_lock(line)
    problems = requires_python_problems([pin], Version("3.10"), lambda name: requires)
    assert bool(problems) is caught, problems


def test_a_line_that_is_not_a_pin_is_refused() -> None:
    with pytest.raises(AssertionError, match="is not a pin"):
        _parse_lock("soupsieve>=2")

