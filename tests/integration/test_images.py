"""The sandbox and services images: built from the repo, reused by content hash, shaped as the plan expects."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from grader.backends.docker import images
from grader.backends.docker.images import Images, ensure_images, find_images, image_specs, spec_hash
from grader.backends.docker.engine import DockerEngine
from grader.backends.docker.golines import RUNNER

TAG = re.compile(r"^sandbox-lab/(sandbox|services):[0-9a-f]{12}$")
SKELETON = ["/home/user", "/project", "/app/workspace", "/etc/secrets", "/opt/sandbox-lab/run"]


@pytest.fixture(scope="module")
def built(docker_client: Any) -> tuple[Images, list[str]]:
    """Build (or reuse) the images once for this module; the first build takes about a minute."""
    messages: list[str] = []
    return ensure_images(DockerEngine(docker_client), progress=messages.append), messages


def _run(client: Any, image: str, command: list[str], **kwargs: Any) -> str:
    out = client.containers.run(image, command, remove=True, network_disabled=True, **kwargs)
    return bytes(out).decode()


# --- building ---------------------------------------------------------------------------


@pytest.mark.docker
def test_ensure_images_builds_both_tagged_by_hash(docker_client: Any, built: tuple[Images, list[str]]) -> None:
    result, messages = built
    assert TAG.match(result.sandbox) and result.sandbox.startswith("sandbox-lab/sandbox:")
    assert TAG.match(result.services) and result.services.startswith("sandbox-lab/services:")
    for name, tag in [("sandbox", result.sandbox), ("services", result.services)]:
        labels = docker_client.images.get(tag).labels
        assert labels[images.LABEL_IMAGE] == name
        assert labels[images.LABEL_HASH].startswith(tag.split(":")[1])
        assert len(labels[images.LABEL_HASH]) == 64
    assert any(m.startswith("base image: ") for m in messages)
    assert re.fullmatch(r"images ready in \d+\.\ds", messages[-1])


@pytest.mark.docker
def test_second_call_reuses_without_building(docker_client: Any, built: tuple[Images, list[str]]) -> None:
    first, _ = built
    ids = {t: docker_client.images.get(t).id for t in (first.sandbox, first.services)}
    messages: list[str] = []
    began = time.monotonic()
    again = ensure_images(DockerEngine(docker_client), progress=messages.append)
    elapsed = time.monotonic() - began
    assert again == first
    assert not [m for m in messages if m.startswith("building")], messages
    assert {t: docker_client.images.get(t).id for t in (again.sandbox, again.services)} == ids
    assert elapsed < 10, f"reuse took {elapsed:.1f}s"


@pytest.mark.docker
def test_find_images_returns_built_images(docker_client: Any, built: tuple[Images, list[str]]) -> None:
    assert find_images(DockerEngine(docker_client)) == built[0]


@pytest.mark.docker
def test_find_images_is_none_when_a_dockerfile_changed(
    docker_client: Any, built: tuple[Images, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = image_specs()
    changed = tmp_path / "sandbox"
    changed.mkdir()
    (changed / "Dockerfile").write_bytes(specs["sandbox"].dockerfile.read_bytes() + b"# edited\n")
    specs["sandbox"] = dataclasses.replace(specs["sandbox"], dockerfile_dir=changed)
    monkeypatch.setattr(images, "image_specs", lambda: specs)
    assert find_images(DockerEngine(docker_client)) is None


# --- what is inside ---------------------------------------------------------------------

_INSPECT_SKELETON = """
import json, os, stat, sys
dirs = {}
for d in sys.argv[1:]:
    st = os.stat(d)
    dirs[d] = {"entries": os.listdir(d), "uid": st.st_uid, "gid": st.st_gid, "mode": oct(stat.S_IMODE(st.st_mode))}
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "home": os.environ["HOME"], "cwd": os.getcwd(), "dirs": dirs}))
"""


@pytest.mark.docker
def test_sandbox_runs_as_uid_1000(docker_client: Any, built: tuple[Images, list[str]]) -> None:
    out = _run(docker_client, built[0].sandbox, ["python3", "-c", "import os; print(os.getuid())"])
    assert out.strip() == "1000"


@pytest.mark.docker
def test_sandbox_skeleton_is_empty_and_root_owned(docker_client: Any, built: tuple[Images, list[str]]) -> None:
    out = _run(docker_client, built[0].sandbox, ["python3", "-c", _INSPECT_SKELETON, *SKELETON])
    seen = json.loads(out)
    assert (seen["uid"], seen["gid"]) == (1000, 1000)
    assert seen["home"] == seen["cwd"] == "/home/user"
    for d in SKELETON:
        assert seen["dirs"][d] == {"entries": [], "uid": 0, "gid": 0, "mode": "0o755"}, d


@pytest.mark.docker
def test_sandbox_has_the_probe_runner_and_no_write_access(docker_client: Any, built: tuple[Images, list[str]]) -> None:
    script = (
        "import os; print(os.path.isfile('/opt/sandbox-lab/probe_runner.py'), "
        "os.access('/home/user', os.W_OK), os.access('/opt/sandbox-lab/run', os.W_OK))"
    )
    assert _run(docker_client, built[0].sandbox, ["python3", "-c", script]).split() == ["True", "False", "False"]


_CACHE = """
import importlib.util, os, sys
sys.path.insert(0, "/opt/sandbox-lab")
cache = "/opt/sandbox-lab/__pycache__"
names = sorted(os.listdir(cache))
spec = importlib.util.find_spec("wire")
with open(spec.cached, "rb") as f:
    flags = int.from_bytes(f.read(8)[4:8], "little")
import wire
print(names, os.stat(cache).st_uid, os.access(cache, os.W_OK), flags, wire.__spec__.cached)
"""


@pytest.mark.docker
def test_the_sandboxs_modules_are_compiled_once_in_the_image_and_read_only_to_its_user(
        docker_client: Any, built: tuple[Images, list[str]]) -> None:
    """Compiled at build (each sandbox compiled them again), root's, checked against their source by hash (flags
    0b11), and not writable by the user a probe runs as: no probe can leave a cache for the next to load."""
    out = _run(docker_client, built[0].sandbox, ["python3", "-c", _CACHE]).strip()
    assert out.startswith("['codec.cpython-"), out
    names, rest = out.rsplit("]", 1)
    assert "probe_runner.cpython-" in names and "wire.cpython-" in names, out
    uid, writable, flags, loaded_from = rest.split()
    assert (uid, writable, flags) == ("0", "False", "3"), out
    assert loaded_from.startswith("/opt/sandbox-lab/__pycache__/wire."), out


@pytest.mark.docker
def test_the_prepared_runner_starts_from_the_images_bytecode_without_site(
        docker_client: Any, built: tuple[Images, list[str]]) -> None:
    """``golines.RUNNER``, verbatim: ``probe_runner`` comes from its compiled file (run as a script it was compiled
    afresh in every sandbox, 9 ms), ``site`` is never imported (-S), and with no orders it refuses, saying why."""
    command = ["sh", "-c", shlex.join(RUNNER) + " </dev/null 2>/tmp/verbose; echo rc=$?; cat /tmp/verbose"]
    out = _run(docker_client, built[0].sandbox, command, environment={"PYTHONVERBOSE": "1"}, tmpfs={"/tmp": ""})
    said, _, verbose = out.partition("\n")
    record = json.loads(said)
    assert (record["probe"], record["step"], record["ok"]) == ("runner", "refused", False), said
    assert "cannot read the orders" in record["detail"] and verbose.startswith("rc=2"), out[:500]
    assert "code object from '/opt/sandbox-lab/__pycache__/probe_runner.cpython-" in verbose, verbose[-2000:]
    assert "import 'site'" not in verbose and "import 'urllib.request'" not in verbose, verbose[-2000:]


@pytest.mark.docker
def test_services_image_has_domains_and_openssl(docker_client: Any, built: tuple[Images, list[str]]) -> None:
    out = _run(
        docker_client,
        built[0].services,
        ["sh", "-c", "id -u && test -f /opt/sandbox-lab/domains.py && python3 -c 'import domains' && openssl version"],
    )
    uid, version = out.strip().splitlines()
    assert uid == "0"
    assert version.startswith("OpenSSL 3")
    for name in ("internet.py", "proxy.py", "http1.py", "nameserver.py", "tls.py", "domains.py"):
        assert _run(docker_client, built[0].services, ["test", "-f", f"/opt/sandbox-lab/{name}"]) == ""
    # the protocol libraries come from Debian, at the versions the host pins beside them (pyproject.toml)
    versions = _run(docker_client, built[0].services,
                    ["python3", "-c", "import dnslib, h11; print(dnslib.version, h11.__version__)"]).split()
    assert versions[0].startswith("0.9.") and versions[1].startswith("0.14.")
    for name in ("http1", "nameserver", "tls", "internet", "proxy"):  # each imports in the image, its libraries found
        assert _run(docker_client, built[0].services, ["python3", "-c", f"import {name}"]) == ""


# Debian's h11 is 0.14.0 with the fix for CVE-2025-43859 backported (0.14.0-1.1~deb12u1): the two bytes after a
# chunk's data must be its CRLF. Checked in the image, since the host's unit tests run a newer wheel.
_CHUNK_CHECK = """
import socket, http1
def frame(payload):
    a, b = socket.socketpair()
    raw = b"POST / HTTP/1.1\\r\\nHost: x\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
    a.sendall(payload); a.close()
    body = http1.Body(raw, http1.parse_head(raw, 10), http1.Reader(b, 1.0), keep=0)
    out = b""
    try:
        while (piece := body.next()) is not None:
            out += piece
    except http1.BadHead:
        return "refused"
    return out.decode()
print(frame(b"3\\r\\nabc\\r\\n0\\r\\n\\r\\n"), frame(b"3\\r\\nabcXX0\\r\\n\\r\\n"), frame(b"zz\\r\\n0\\r\\n\\r\\n"))
"""


@pytest.mark.docker
def test_services_image_frames_chunks_strictly(docker_client: Any, built: tuple[Images, list[str]]) -> None:
    assert _run(docker_client, built[0].services, ["python3", "-c", _CHUNK_CHECK]).split() == ["abc", "refused", "refused"]


# --- hashing (no Docker) ------------------------------------------------------------------


def test_changing_the_dockerfile_changes_the_hash(tmp_path: Path) -> None:
    spec = image_specs()["sandbox"]
    (tmp_path / "Dockerfile").write_bytes(spec.dockerfile.read_bytes() + b"RUN true\n")
    edited = dataclasses.replace(spec, dockerfile_dir=tmp_path)
    assert spec_hash(spec, "sha256:base") == spec_hash(spec, "sha256:base")
    assert spec_hash(edited, "sha256:base") != spec_hash(spec, "sha256:base")
    assert spec.tag(spec_hash(edited, "sha256:base")) != spec.tag(spec_hash(spec, "sha256:base"))


def test_changing_a_context_file_or_the_base_changes_the_hash(tmp_path: Path) -> None:
    spec = image_specs()["services"]
    name, source = spec.files[0]
    copy = tmp_path / name
    copy.write_bytes(source.read_bytes() + b"\n# edited\n")
    edited = dataclasses.replace(spec, files=((name, copy), *spec.files[1:]))
    assert spec_hash(edited, "sha256:base") != spec_hash(spec, "sha256:base")
    assert spec_hash(spec, "sha256:other") != spec_hash(spec, "sha256:base")
