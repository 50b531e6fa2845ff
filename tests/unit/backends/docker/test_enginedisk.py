"""The engine disk without an engine: which disk is chosen, the grader-side files, the tar streams both ways."""

from __future__ import annotations

import base64
import io
import json
import os
import posixpath
import subprocess
import sys
import socket
import tarfile
from pathlib import Path
from typing import Any, Optional

import pytest

from grader.backends.docker import enginedisk as ed
from grader.backends.docker import volumes as vol
from grader.backends.docker.engine import ContainerRef, DockerEngine
from grader.backends.runs import RunDir
from grader.core.errors import BackendError


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ({}, "local"),
        ({"DOCKER_HOST": "unix:///var/run/docker.sock"}, "local"),
        ({"DOCKER_HOST": "tcp://10.0.0.5:2376"}, "remote"),
        ({"DOCKER_HOST": "ssh://grader@engine"}, "remote"),
        ({"DOCKER_HOST": "tcp://127.0.0.1:2375", ed.ENV: "local"}, "local"),  # the user knows it shares the disk
        ({ed.ENV: "remote"}, "remote"),
        ({ed.ENV: " Auto ", "DOCKER_HOST": "tcp://h:1"}, "remote"),
    ],
)
def test_the_disk_follows_docker_host_unless_told(env: dict[str, str], mode: str) -> None:
    assert ed.engine_mode(env) == mode
    disk = ed.disk_for(object(), env)
    assert disk.remote == (mode == "remote")
    assert isinstance(disk, ed.EngineDisk if mode == "remote" else ed.HostDisk)


def test_an_unknown_disk_mode_is_a_clear_error() -> None:
    with pytest.raises(BackendError, match=r"SANDBOX_LAB_ENGINE_DISK='remtoe'.*local, remote or auto"):
        ed.engine_mode({ed.ENV: "remtoe"})


def test_engine_times_keep_their_nanoseconds_and_zone() -> None:
    assert vol.parse_engine_time("1970-01-01T00:00:10.5Z") == 10.5
    assert vol.parse_engine_time("2026-01-01T00:00:00.123456789Z") == pytest.approx(1767225600.123456789)
    assert vol.parse_engine_time("2026-01-01T01:00:00+01:00") == 1767225600.0
    assert vol.parse_engine_time("0001-01-01T00:00:00Z") == 0.0  # Go's zero time: never finished
    assert vol.parse_engine_time("") == 0.0 and vol.parse_engine_time("yesterday") == 0.0


def test_host_files_are_the_directory_itself(tmp_path: Path) -> None:
    files = ed.HostDisk().files("svc", lambda: tmp_path / "svc")
    files.mkdir("out")
    files.write("policy.json", b'{"allowed": []}')
    out = files.sub("out")
    (tmp_path / "svc" / "out" / "log").write_bytes(b"0123456789")
    assert (tmp_path / "svc" / "policy.json").read_bytes() == b'{"allowed": []}'
    assert not (tmp_path / "svc" / "policy.json.tmp").exists()  # replaced whole, never written in place
    assert out.read("log", 4, 3) == b"456" and out.read("missing") == b""
    st = out.stat("log")
    assert st is not None and st.size == 10 and out.stat("missing") is None
    assert vol.service_mount(files)["Source"] == str(tmp_path / "svc") and vol.service_mount(files)["Type"] == "bind"
    assert files.name == "svc"
    files.remove()
    assert not (tmp_path / "svc").exists()


class _FakeContainer:
    def __init__(self, cid: str = "c1", mounts: Optional[list[dict[str, Any]]] = None) -> None:
        self.id = cid
        self.puts: list[tuple[str, dict[str, Optional[bytes]]]] = []
        self.owners: list[dict[str, tuple[int, int, int]]] = []  # per put: each member's uid, gid and mode
        self.attrs: dict[str, Any] = {"Mounts": mounts or []}
        self.archive = b""

    def put_archive(self, path: str, data: bytes) -> bool:
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            members = tf.getmembers()
            got = {m.name: (tf.extractfile(m).read() if m.isfile() else None) for m in members}  # type: ignore[union-attr]
        self.puts.append((path, got))
        self.owners.append({m.name: (m.uid, m.gid, m.mode) for m in members})
        return True

    def reload(self) -> None:
        pass

    def get_archive(self, path: str) -> tuple[Any, dict[str, Any]]:
        return iter([self.archive[i:i + 1000] for i in range(0, len(self.archive), 1000)]), {}


class _FakeApi:
    """The SDK's low-level client as the engine adapter reaches the one container: by id, to the container."""

    def __init__(self, client: "_FakeClient") -> None:
        self.client = client

    def put_archive(self, ident: str, path: str, data: bytes) -> bool:
        return self.client.container.put_archive(path, data)

    def get_archive(self, ident: str, path: str) -> tuple[Any, dict[str, Any]]:
        return self.client.container.get_archive(path)

    def exec_create(self, ident: str, cmd: list[str], **kwargs: Any) -> dict[str, str]:
        self.client.execs.append(self.client.container.exec_run(cmd, **kwargs))  # type: ignore[attr-defined]
        return {"Id": str(len(self.client.execs) - 1)}

    def exec_start(self, exec_id: str, **kwargs: Any) -> Any:
        return self.client.execs[int(exec_id)][1]

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        return {"ExitCode": self.client.execs[int(exec_id)][0]}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client.extra, name)  # the archive API's HEAD, where a test gives it


class _FakeClient:
    def __init__(self, container: _FakeContainer) -> None:
        self.container = container
        self.created: list[dict[str, Any]] = []
        self.containers = self
        self.execs: list[Any] = []
        self.extra: Any = None  # more of the low-level client, where a test gives it
        self.api = _FakeApi(self)

    def create(self, image: str, command: list[str], **kwargs: Any) -> _FakeContainer:
        self.created.append({"image": image, "command": command, **kwargs})
        return self.container

    def get(self, ident: str) -> _FakeContainer:
        self.container.reload()
        return self.container


def _ref(c: _FakeContainer) -> ContainerRef:
    return ContainerRef(c.id, "")


def test_volume_files_go_in_when_the_service_exists_and_at_once_after() -> None:
    c = _FakeContainer()
    files = ed.EngineDisk(DockerEngine(_FakeClient(c))).files("sl-proxy-1", lambda: pytest.fail("no directory on the grader's disk"))
    mount = vol.service_mount(files)
    assert mount["Type"] == "volume" and not mount.get("Source") and mount["Target"] == vol.SERVICE_ROOT
    files.mkdir("out")
    files.write("proxy.json", b"{}")
    assert files.stat("out/ready") is None and files.read("out/log") == b""  # no container yet: nothing written
    assert c.puts == []
    vol.attach(files, _ref(c))
    assert c.puts == [(vol.SERVICE_ROOT, {"out": None, "proxy.json": b"{}"})]
    files.sub("out").write("x.json", b"1")  # a view writes under its own path, straight away
    assert c.puts[-1] == (vol.SERVICE_ROOT, {"out/x.json": b"1"})
    files.remove()  # the volume goes with the container: nothing to do here


def _tar(entries: list[tarfile.TarInfo], data: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for info in entries:
            body = data.get(info.name)
            if body is not None:
                info.size = len(body)
            tf.addfile(info, io.BytesIO(body) if body is not None else None)
    return buf.getvalue()


def _entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


def test_the_world_comes_back_as_left_and_nothing_escapes_it(tmp_path: Path) -> None:
    world = tmp_path / "run" / "world"
    raw = _tar(
        [
            _entry("world", tarfile.DIRTYPE),
            _entry("world/home", tarfile.DIRTYPE),
            _entry("world/home/a.txt"),
            _entry("world/home/big"),
            _entry("world/home/link", tarfile.SYMTYPE, "/etc/passwd"),
            _entry("world/home/hard", tarfile.LNKTYPE, "world/home/a.txt"),
            _entry("world/home/link/under"),  # under a link: never written through it
            _entry("world/../escape"),
            _entry("/abs"),
            _entry("elsewhere/x"),
            _entry("world/home/fifo", tarfile.FIFOTYPE),
        ],
        {"world/home/a.txt": b"canary", "world/home/big": b"x" * (vol.FETCH_FILE_LIMIT + 10),
         "world/home/link/under": b"no", "world/../escape": b"no", "/abs": b"no", "elsewhere/x": b"no"},
    )
    vol._unpack_world(io.BytesIO(raw), world)
    assert (world / "home" / "a.txt").read_bytes() == b"canary"
    assert (world / "home" / "hard").read_bytes() == b"canary"
    assert len((world / "home" / "big").read_bytes()) == vol.FETCH_FILE_LIMIT
    assert os.readlink(world / "home" / "link") == "/etc/passwd"  # made, not followed
    assert not (world / "home" / "fifo").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(["run", "world", "home", "a.txt", "hard", "big", "link"])


def test_a_world_too_large_to_bring_back_is_an_infrastructure_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.core.errors import InfrastructureError

    monkeypatch.setattr(vol, "FETCH_TOTAL_LIMIT", 10)
    raw = _tar([_entry("world", tarfile.DIRTYPE), _entry("world/a"), _entry("world/b")], {"world/a": b"123456", "world/b": b"123456"})
    with pytest.raises(InfrastructureError, match="too large"):
        vol._unpack_world(io.BytesIO(raw), tmp_path / "world")


def test_the_run_copy_sends_what_the_sandbox_mounts_and_brings_the_world_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path))
    from grader import load_policy
    from grader.core.plan import build_plan

    run = RunDir.create("sl-0000000001")
    run.lay_out(build_plan(load_policy({"filesystem": {"allowWrite": ["/project"]}})))
    (run.path / "run").mkdir()
    (run.path / "run" / "config.json").write_text("{}")
    (run.path / "resolv.conf").write_text("nameserver 127.0.0.1\n")
    source = "/var/lib/docker/volumes/abc/_data"
    c = _FakeContainer(mounts=[{"Destination": vol.COPY_ROOT, "Source": source}])
    client = _FakeClient(c)
    copy = ed.EngineDisk(DockerEngine(client)).copy(run, "services:1", "sl-0000000001", {"org.sandbox-lab.run": "sl-0000000001"})
    where = copy.place()
    assert copy.container is not None and copy.container.id == c.id
    made = client.created[0]
    assert made["network_mode"] == "none" and made["labels"]["org.sandbox-lab.role"] == "disk"
    assert [m["Target"] for m in made["mounts"]] == [vol.COPY_ROOT] and made["mounts"][0]["Type"] == "volume"
    path, sent = c.puts[0]
    assert path == vol.COPY_ROOT
    assert {n.split("/")[0] for n in sent} == {"world", "mask", "run", "resolv.conf"}  # never the owner record
    assert sent["run/config.json"] == b"{}"
    assert where("world/project/") == f"{source}/world/project" and where("mask/empty") == f"{source}/mask/empty"
    key = next(k for k in sent if k.endswith(".ssh/id_rsa"))
    assert run.canaries["/home/user/.ssh/id_rsa"] in (sent[key] or b"").decode()

    # what the sandbox left: the key rewritten, the rest gone
    c.archive = _tar([_entry("world", tarfile.DIRTYPE), _entry("world/home", tarfile.DIRTYPE), _entry("world/home/new")], {"world/home/new": b"written"})
    copy.fetch()
    assert sorted(str(p.relative_to(run.world)) for p in run.world.rglob("*")) == ["home", "home/new"]
    assert (run.path / "owner.json").exists()


def test_the_grader_copy_is_the_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader import load_policy
    from grader.core.plan import build_plan

    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path))
    run = RunDir.create("sl-0000000002")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the world's user: the world copy is already theirs
    run.lay_out(build_plan(load_policy({})))
    assert run.handed
    copy = ed.HostDisk().copy(run, "services:1", "sl-0000000002", {})
    assert copy.container is None
    assert copy.place()("world/home/user") == str(run.path / "world" / "home" / "user")
    copy.fetch()  # nothing to bring back


def test_a_world_the_grader_could_not_hand_over_goes_in_a_volume_owned_by_the_sandboxs_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither root nor the world's user: the world copy stays the grader's and private, and reaches the
    sandbox through a volume with the owner root would have given it; never by opening it to every user."""
    import socket

    from grader import load_policy
    from grader.core.errors import BackendError
    from grader.core.plan import build_plan

    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path / "runs"))
    run = RunDir.create("sl-0000000003")
    monkeypatch.setattr(os, "geteuid", lambda: 4321)  # from here on, a grader that is neither
    plan = build_plan(load_policy({}))
    run.lay_out(plan)
    assert not run.handed and run.uid == plan.world.uid
    for p in [run.world, *run.world.rglob("*")]:
        assert not p.stat().st_mode & 0o022, f"{p} is writable by others"
    assert (run.host_path("/home/user/.ssh/id_rsa").stat().st_mode & 0o777) == 0o600  # the world's mode, kept
    (run.path / "run").mkdir()
    (run.path / "run" / "config.json").write_text("{}")
    with pytest.raises(BackendError, match="root or as the world's user"):
        ed.HostDisk().copy(run, "services:1", "sl-0000000003", {}).place()  # no engine to send it to

    source = "/var/lib/docker/volumes/abc/_data"
    c = _FakeContainer(mounts=[{"Destination": vol.COPY_ROOT, "Source": source}])
    client = _FakeClient(c)
    copy = ed.HostDisk(DockerEngine(client)).copy(run, "services:1", "sl-0000000003", {"org.sandbox-lab.run": "sl-0000000003"})
    where = copy.place()
    assert copy.container is not None and copy.container.id == c.id
    assert client.created[0]["labels"]["org.sandbox-lab.role"] == "disk"
    assert where("world/project") == f"{source}/world/project"
    owners = c.owners[0]
    world = {n: o for n, o in owners.items() if n.split("/")[0] == "world"}
    assert world and all(uid == gid == plan.world.uid for uid, gid, _ in world.values())
    assert next(mode for n, (_, _, mode) in world.items() if n.endswith(".ssh/id_rsa")) == 0o600
    assert owners["run/config.json"][0] == os.getuid()  # the runner's config stays as written
    copy.place()  # placed again (the next session): the same volume, never a second helper
    assert len(client.created) == 1 and len(c.puts) == 2

    # a socket (a job's signing agent) cannot travel in a tar: refused, never silently left out
    with socket.socket(socket.AF_UNIX) as agent:
        agent.bind(str(run.path / "run" / "agent.sock"))
        with pytest.raises(BackendError, match="SSH-agent socket"):
            copy.place()


def test_the_role_label_is_simnets() -> None:
    from grader.backends.docker.simnet import LABEL_ROLE

    assert ed._ROLE == LABEL_ROLE


def test_the_engine_side_listener_reports_its_port_and_each_payload() -> None:
    """The script the listener container runs, run here: first its port, then one JSON line per connection."""
    proc = subprocess.Popen([sys.executable, "-c", ed._LISTENER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        port = first["port"]
        # where the grader's own listener would listen, never every interface
        from grader.backends.runs import sandbox_addresses

        assert first["addresses"] == list(sandbox_addresses()) and "0.0.0.0" not in first["addresses"]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"token\n")
        assert json.loads(proc.stdout.readline()) == {"hit": "token\n"}
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


class _Head:
    def __init__(self, size: Optional[int]) -> None:
        self.status_code = 404 if size is None else 200
        stat = {"name": "tcp.jsonl", "size": size, "mode": 420, "mtime": "2026-12-02T21:00:00.5Z"}
        self.headers = {"X-Docker-Container-Path-Stat": base64.b64encode(json.dumps(stat).encode()).decode()}


class _Api:
    def __init__(self, sizes: dict[str, Optional[int]]) -> None:
        self.sizes = sizes

    def _url(self, fmt: str, cid: str) -> str:
        return fmt.format(cid)

    def head(self, url: str, params: dict[str, str]) -> _Head:
        return _Head(self.sizes.get(params["path"]))


class _Service(_FakeContainer):
    """A running service whose ``tail`` answers as docker-py did over TCP: whole, empty or cut (frames lost)."""

    def __init__(self, exec_out: bytes, content: bytes) -> None:
        super().__init__()
        self.exec_out, self.archived = exec_out, 0
        info = tarfile.TarInfo("tcp.jsonl")
        info.size = len(content)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            tf.addfile(info, io.BytesIO(content))
        self.archive = buf.getvalue()

    def exec_run(self, cmd: list[str], **kwargs: Any) -> tuple[int, tuple[bytes, None]]:
        return 0, (self.exec_out, None)

    def get_archive(self, path: str) -> tuple[Any, dict[str, Any]]:
        self.archived += 1
        return super().get_archive(path)


LOG = b"".join(b'{"seq": %d, "kind": "tcp", "port": 4444}\n' % i for i in range(70))


@pytest.mark.parametrize(("exec_out", "offset", "archived"), [
    (LOG, 0, 0),  # whole: the archive is not asked
    (LOG[100:], 100, 0),  # whole from an offset
    (b"", 0, 1),  # every frame lost, as a CI run saw: a closed log came back empty
    (LOG[:1000], 0, 1),  # cut
    (LOG[100:900], 100, 1),  # cut, from an offset
])
def test_a_log_read_through_the_engine_is_whole_even_when_the_exec_loses_its_output(
    exec_out: bytes, offset: int, archived: int,
) -> None:
    c = _Service(exec_out, LOG)
    client = _FakeClient(c)
    client.extra = _Api({posixpath.join(vol.SERVICE_ROOT, "out/runs/tcp.jsonl"): len(LOG)})
    files = ed.EngineDisk(DockerEngine(client)).files("sl-internet-1", lambda: pytest.fail("no directory on the grader's disk"))
    vol.attach(files, _ref(c))
    assert files.sub("out").read("runs/tcp.jsonl", offset) == LOG[offset:]
    assert c.archived == archived
