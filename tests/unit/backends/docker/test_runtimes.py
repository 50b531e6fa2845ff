"""The sandbox's OCI runtime: the operator's setting, checked against the engine's registered runtimes, failing closed.

No Docker here: the engine is a fake whose ``info()`` lists runtimes as
dockerd does (``"Runtimes": {"runc": {...}, "runsc": {...}}``).
"""

from __future__ import annotations

from typing import Any

import pytest

from grader.backends.docker.backend import DockerBackend
from grader.backends.docker.engine import DockerEngine
from grader.backends.docker.images import Images
from grader.backends.docker.run import Backing, hardened_options
from grader.backends.docker.runtimes import (
    RUNTIME_ENV, RuntimeUnavailable, check_runtime, runtime_from_env, sandbox_runtime,
)
from grader.core.errors import BackendError
from grader.core.plan import Hardening, build_plan


class _Engine:
    """A docker client as far as the runtime check asks it: ``info()`` and nothing else."""

    def __init__(self, runtimes: dict[str, Any]) -> None:
        self.runtimes = runtimes
        self.asked = 0

    def info(self) -> dict[str, Any]:
        self.asked += 1
        return {"Runtimes": self.runtimes, "DefaultRuntime": "runc"}

    def __getattr__(self, name: str) -> Any:  # anything else would be the backend making things: not here
        raise AssertionError(f"the engine was asked for {name} before the runtime was checked")


WITH_RUNSC = {"runc": {"path": "runc"}, "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]}}
RUNC_ONLY = {"io.containerd.runc.v2": {}, "runc": {"path": "runc"}}


def test_unset_or_empty_means_the_engines_default() -> None:
    assert runtime_from_env({}) is None
    assert runtime_from_env({RUNTIME_ENV: "  "}) is None
    assert runtime_from_env({RUNTIME_ENV: "runsc"}) == "runsc"


@pytest.mark.parametrize("value", ["runsc --platform=kvm", "../runsc", "-runsc", "run;sc", "x" * 65])
def test_a_value_that_is_no_runtimes_name_is_refused(value: str) -> None:
    with pytest.raises(RuntimeUnavailable, match="is not a runtime's name"):
        runtime_from_env({RUNTIME_ENV: value})


def test_a_registered_runtime_is_used_and_none_is_never_checked() -> None:
    assert check_runtime("runsc", WITH_RUNSC) == "runsc"
    assert check_runtime(None, []) is None
    engine = _Engine(WITH_RUNSC)
    assert sandbox_runtime(DockerEngine(engine), None) is None and engine.asked == 0
    assert sandbox_runtime(DockerEngine(engine), "runsc") == "runsc" and engine.asked == 1


def test_an_unregistered_runtime_fails_closed_with_the_reason_and_the_fix() -> None:
    with pytest.raises(RuntimeUnavailable) as info:
        sandbox_runtime(DockerEngine(_Engine(RUNC_ONLY)), "runsc")
    message = str(info.value)
    assert "no runtime of that name" in message and "'runsc'" in message
    assert "io.containerd.runc.v2, runc" in message  # what the engine does have
    assert "scripts/ensure-docker --runtime runsc" in message and RUNTIME_ENV in message
    assert isinstance(info.value, BackendError)  # the CLI's backend-error path: not judged, said why
    other = pytest.raises(RuntimeUnavailable, check_runtime, "kata", RUNC_ONLY)
    assert "daemon.json" in str(other.value)


def test_an_engine_listing_no_runtimes_is_not_taken_for_one_that_has_it() -> None:
    with pytest.raises(RuntimeUnavailable, match="none listed"):
        sandbox_runtime(DockerEngine(_Engine({})), "runsc")


def test_the_backend_refuses_an_unregistered_runtime_before_it_makes_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    images = Images(sandbox="sandbox-lab/sandbox:x", services="sandbox-lab/services:x")
    monkeypatch.setenv(RUNTIME_ENV, "runsc")
    with pytest.raises(RuntimeUnavailable):
        DockerBackend(DockerEngine(_Engine(RUNC_ONLY)), images)
    monkeypatch.delenv(RUNTIME_ENV)
    with pytest.raises(RuntimeUnavailable):
        DockerBackend(DockerEngine(_Engine(RUNC_ONLY)), images, runtime="runsc")


def test_the_runtime_reaches_every_sandbox_container_and_only_when_asked() -> None:
    h = build_plan(None).hardening
    assert "runtime" not in hardened_options(h)  # the engine's default: the option is not sent at all
    assert hardened_options(h, "runsc")["runtime"] == "runsc"
    # under a runtime, every lock of the hardening is still there
    plain = hardened_options(Hardening())
    moved = ("runtime", "pids_limit", "ulimits", "mem_limit", "memswap_limit")  # the process limit is counted elsewhere under gVisor (below)
    assert {k: v for k, v in hardened_options(Hardening(), "runsc").items() if k not in moved} == {
        k: v for k, v in plain.items() if k not in moved}
    for other in (None, "kata"):  # any runtime but gVisor: exactly the plain container's limits
        assert {k: v for k, v in hardened_options(Hardening(), other).items() if k != "runtime"} == plain
    backing = Backing(engine=None, images=None, disk=None, leftovers=None, sharing=None,  # type: ignore[arg-type]
                      remove_later=lambda f: None, execute=lambda p, j: None, runtime="runsc")  # type: ignore[arg-type,return-value]
    assert backing.harden(Hardening())["runtime"] == "runsc"
    assert "runtime" not in Backing(None, None, None, None, None, lambda f: None, lambda p, j: None).harden(Hardening())  # type: ignore[arg-type,return-value]


def _ulimits(opts: dict[str, object]) -> dict[str, tuple[int, int]]:
    return {u["Name"]: (u["Soft"], u["Hard"]) for u in opts["ulimits"]}  # type: ignore[attr-defined]


def test_under_gvisor_the_fork_limit_is_counted_by_its_kernel_and_its_threads_are_still_bounded() -> None:
    """Measured under runsc: 256 tasks took 1,415 host threads, so the plan's pids limit on the cgroup killed
    gVisor itself (and the run's evidence) before a fork bomb met it; under gVisor RLIMIT_NPROC carries it."""
    h = Hardening()
    runc, gvisor = hardened_options(h), hardened_options(h, "runsc")
    assert runc["pids_limit"] == h.pids_limit and "nproc" not in _ulimits(runc)  # never per-user across the machine
    assert _ulimits(gvisor)["nproc"] == (h.pids_limit, h.pids_limit)
    assert _ulimits(gvisor)["nofile"] == _ulimits(runc)["nofile"]
    # still bounded, and by a number tied to the plan's: a gaming change that drops the cgroup limit fails here
    assert h.pids_limit < gvisor["pids_limit"] <= h.pids_limit * 16
    # gVisor's stubs need memory of their own (measured 4.6 MiB a task); still a bound, swap included
    assert runc["mem_limit"] == runc["memswap_limit"] == h.mem_bytes
    assert h.mem_bytes + h.pids_limit * (4 << 20) < gvisor["mem_limit"] == gvisor["memswap_limit"] <= h.mem_bytes + h.pids_limit * (8 << 20)


def test_a_tenants_code_runs_under_the_code_runtime_else_the_runtime_of_every_sandbox() -> None:
    from grader.backends.docker.runtimes import code_runtime_from_env

    assert code_runtime_from_env({}) is None
    assert code_runtime_from_env({"SANDBOX_LAB_RUNTIME": "runsc"}) == "runsc"
    assert code_runtime_from_env({"SANDBOX_LAB_CODE_RUNTIME": "runsc"}) == "runsc"
    assert code_runtime_from_env({"SANDBOX_LAB_CODE_RUNTIME": "runsc", "SANDBOX_LAB_RUNTIME": "kata"}) == "runsc"
    assert code_runtime_from_env({"SANDBOX_LAB_CODE_RUNTIME": " ", "SANDBOX_LAB_RUNTIME": "runsc"}) == "runsc"
    with pytest.raises(RuntimeUnavailable, match="SANDBOX_LAB_CODE_RUNTIME='runsc; rm'"):
        code_runtime_from_env({"SANDBOX_LAB_CODE_RUNTIME": "runsc; rm"})
