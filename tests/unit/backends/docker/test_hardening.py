"""``docker.hardening.hardened_options``: the container settings each ``Hardening`` becomes, without Docker (issue 39:
every resource a tenant can use is bounded; the real containers are in tests/integration/test_plain_container_disk.py)."""

from __future__ import annotations

from grader.backends.docker.hardening import hardened_options
from grader.backends.quota import SCRATCH_FILES
from grader.core.plan import BASELINE_HARDENING, Hardening


def test_the_plain_container_has_a_read_only_root_and_each_writable_directory_bounded() -> None:
    opts = hardened_options(BASELINE_HARDENING)
    assert opts["read_only"] is True  # its own layer is on the engine's disk, which nothing here can bound
    size = BASELINE_HARDENING.scratch_bytes
    assert opts["tmpfs"] == {
        "/tmp": f"size={BASELINE_HARDENING.tmp_bytes},mode=1777",
        "/var/tmp": f"size={size},nr_inodes={SCRATCH_FILES},mode=1777,exec",
        "/run/lock": f"size={size},nr_inodes={SCRATCH_FILES},mode=1777,exec",
    }
    # still weak on purpose: Docker's capabilities and setuid binaries
    assert "cap_drop" not in opts and "security_opt" not in opts


def test_a_policy_sandbox_gets_only_its_tmp() -> None:
    opts = hardened_options(Hardening())
    assert opts["read_only"] is True and list(opts["tmpfs"]) == ["/tmp"]
    assert opts["cap_drop"] == ["ALL"] and opts["security_opt"] == ["no-new-privileges"]


def test_no_sandbox_may_dump_core_and_its_log_is_bounded() -> None:
    for h in (Hardening(), BASELINE_HARDENING):
        opts = hardened_options(h)
        core = [u for u in opts["ulimits"] if u["Name"] == "core"]
        assert [(u["Soft"], u["Hard"]) for u in core] == [(0, 0)]  # a hard 0: the job cannot raise it
        assert opts["log_config"]["Config"] == {"max-size": "8m"}
