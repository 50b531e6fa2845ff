"""The bystander outlived the run: a container, network and volume on the engine that the suite did not make.

``bystander.py`` says what it is; ``conftest.py`` starts it before the first
test and runs this check last of all. Any test that stops or restarts the
engine, prunes it, or sweeps beyond what it made fails the run here. Where
no engine answers it skips, and fails under ``CI``, as every Docker test.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

import bystander

pytestmark = [pytest.mark.docker]


def test_the_bystander_is_still_there_and_running(docker_client: Any, request: pytest.FixtureRequest) -> None:
    made = request.config.stash.get(bystander.KEY, None)
    if made is None or not made.container:
        why = made.why if made is not None else "the session did not start one (conftest.py's _start_bystander)"
        if os.environ.get("CI"):
            pytest.fail(f"no bystander to check: {why}; CI is set, so this fails instead of skipping", pytrace=False)
        pytest.skip(f"no bystander to check: {why}")
    try:
        problems = bystander.check(docker_client, made)
    finally:
        bystander.remove(docker_client, made)
    assert problems == [], "the run touched what it did not create:\n  " + "\n  ".join(problems)
