"""scripts/docker_daemon_config.py: Sandbox Lab's keys merged into /etc/docker/daemon.json, every other key kept, idempotently.

Pure: ``merge`` on values, ``main`` on a file of the test's own (never the
machine's /etc/docker/daemon.json). ``scripts/ensure-docker`` calls it before
it starts dockerd (``--pools``) and for ``--runtime runsc``; the pools it
writes were checked against a real dockerd of its own (docs/scaling.md, "Address pools").
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "docker_daemon_config.py"
ENSURE = ROOT / "scripts" / "ensure-docker"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docker_daemon_config", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ddc = _load()
RUNSC = ("runsc", "/usr/bin/runsc", ["--network=host"])


def test_pools_are_set_on_an_empty_config_and_cut_small() -> None:
    out, changes = ddc.merge({}, pools=True)
    assert out == {"default-address-pools": ddc.POOLS} and len(changes) == 1
    (pool,) = out["default-address-pools"]
    base = ipaddress.ip_network(pool["base"])
    assert base.is_private
    # hundreds of networks, each room for the busiest network's containers (the shared internet and its proxies)
    networks = 2 ** (pool["size"] - base.prefixlen)
    hosts = 2 ** (32 - pool["size"]) - 3  # less the network, broadcast and gateway addresses
    assert networks >= 512 and hosts >= 50
    # not one of Docker's own default ranges (172.17.0.0/12, 192.168.0.0/16): an engine started before
    # keeps networks there, and a range in both would overlap
    assert not base.overlaps(ipaddress.ip_network("172.16.0.0/12"))
    assert not base.overlaps(ipaddress.ip_network("192.168.0.0/16"))


def test_every_other_key_is_kept_and_the_input_is_not_changed() -> None:
    before: dict[str, Any] = {"log-driver": "local", "runtimes": {"kata": {"path": "/usr/bin/kata"}}, "debug": True}
    frozen = json.dumps(before)
    out, _ = ddc.merge(before, pools=True, runtime=RUNSC)
    assert json.dumps(before) == frozen
    assert out["log-driver"] == "local" and out["debug"] is True
    assert out["runtimes"] == {"kata": {"path": "/usr/bin/kata"},
                               "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]}}
    assert list(out)[:3] == ["log-driver", "runtimes", "debug"]  # the file's order stays


def test_an_operators_own_pools_are_kept() -> None:
    theirs = {"default-address-pools": [{"base": "10.99.0.0/16", "size": 24}]}
    out, changes = ddc.merge(theirs, pools=True)
    assert out == theirs and changes == []


def test_merging_twice_changes_nothing_the_second_time() -> None:
    once, first = ddc.merge({"debug": False}, pools=True, runtime=RUNSC)
    twice, second = ddc.merge(once, pools=True, runtime=RUNSC)
    assert first and second == [] and twice == once


def test_a_runtimes_arguments_are_replaced_not_appended() -> None:
    old = {"runtimes": {"runsc": {"path": "/usr/bin/runsc"}}}
    out, changes = ddc.merge(old, runtime=RUNSC)
    assert out["runtimes"]["runsc"] == {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]} and changes
    back, changes = ddc.merge(out, runtime=("runsc", "/usr/bin/runsc", []))
    assert back["runtimes"]["runsc"] == {"path": "/usr/bin/runsc"} and changes


def test_the_file_is_written_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "docker" / "daemon.json"
    assert ddc.main(["--file", str(path), "--pools", "--runtime", "runsc=/usr/bin/runsc", "--runtime-arg=--network=host"]) == 0
    written = json.loads(path.read_text())
    assert written["default-address-pools"] == ddc.POOLS and written["runtimes"]["runsc"]["runtimeArgs"] == ["--network=host"]
    mtime = path.stat().st_mtime_ns
    path.chmod(0o444)  # a second write would still succeed as root; the time says it did not happen
    assert ddc.main(["--file", str(path), "--pools", "--runtime", "runsc=/usr/bin/runsc", "--runtime-arg=--network=host"]) == 0
    assert path.stat().st_mtime_ns == mtime
    assert not list(path.parent.glob(".daemon.json.*"))  # no temporary file left beside it


def test_the_script_runs_as_a_command_and_says_what_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"debug": true}\n')
    got = subprocess.run([sys.executable, str(SCRIPT), "--file", str(path), "--pools"], capture_output=True, text=True)
    assert got.returncode == 0 and "default-address-pools" in got.stdout
    again = subprocess.run([sys.executable, str(SCRIPT), "--file", str(path), "--pools"], capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout == ""
    assert json.loads(path.read_text())["debug"] is True


@pytest.mark.parametrize("text", ['["not", "an", "object"]', '{"runtimes": []}', "{not json"])
def test_a_file_it_cannot_merge_into_is_left_alone_with_a_reason(tmp_path: Path, text: str) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(text)
    got = subprocess.run([sys.executable, str(SCRIPT), "--file", str(path), "--pools", "--runtime", "runsc=/usr/bin/runsc"],
                         capture_output=True, text=True)
    assert got.returncode == 2 and "fix or remove it" in got.stderr
    assert path.read_text() == text


def test_ensure_docker_refuses_a_runtime_it_does_not_install() -> None:
    got = subprocess.run(["bash", str(ENSURE), "--runtime", "kata"], capture_output=True, text=True)
    assert got.returncode == 2 and "runsc (gVisor) only" in got.stderr
    got = subprocess.run(["bash", str(ENSURE), "--frobnicate"], capture_output=True, text=True)
    assert got.returncode == 2 and "usage" in got.stderr


def test_ensure_docker_writes_pools_before_it_starts_dockerd() -> None:
    text = ENSURE.read_text()
    pools = text.index("docker_daemon_config.py\" --pools")
    assert pools < text.index("DEBIAN_FRONTEND=noninteractive apt-get install") and pools < text.index("setsid nohup dockerd")
