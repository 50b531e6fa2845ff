"""The services' configs: one writer, one strict reader, shared by the backends and the services."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.protocol import configs
from grader.protocol.configs import ConfigError, InternetConfig, ProxyConfig, WorldPorts

WORLD = WorldPorts(serves={"pypi.org": (80, 443), "attacker.example": (53, 80, 443, 4444)},
                   wildcard_zones=("attacker.example",), operators=("pypi.org",), catch_all="attacker.example")
PROXY = ProxyConfig(allowed=(), dns_server="127.0.0.1", out_dir="/out", world=WORLD, any_host=True,
                    upstream_ports={"80": 8080, "443": 8443})
INTERNET = InternetConfig(hosts=("pypi.org",), serves={"pypi.org": (80, 443)}, out_dir="/out", nonce="n", tcp_ports=(4444,))


@pytest.mark.parametrize("config", [PROXY, INTERNET, ProxyConfig(allowed=("pypi.org",), dns_server="x", out_dir="/o", world=None)])
def test_a_config_reads_back_as_written(config: Any) -> None:
    assert configs.parse_config(type(config), json.loads(configs.dump_config(config)), "c.json") == config


def test_the_string_true_where_a_boolean_is_due_is_refused_not_read_as_false() -> None:
    """The bug this module ends: ``config["any_host"] is True`` read "true" (a typo'd writer) as False, silently."""
    value = json.loads(configs.dump_config(PROXY))
    value["any_host"] = "true"
    with pytest.raises(ConfigError, match=r"^proxy\.json: config\.any_host: expected bool, got str$"):
        configs.parse_config(ProxyConfig, value, "proxy.json")


@pytest.mark.parametrize("change, says", [
    (lambda c: c.pop("world"), "missing keys ['world']"),
    (lambda c: c.__setitem__("alowed", []), "unknown keys ['alowed']"),
    (lambda c: c.__setitem__("listen_port", "3128"), "config.listen_port: expected int, got str"),
    (lambda c: c["upstream_ports"].__setitem__("80", "8080"), "config.upstream_ports.80: expected int, got str"),
    (lambda c: c["world"]["serves"].__setitem__("pypi.org", ["443"]), "config.world.serves.pypi.org[0]: expected int, got str"),
    (lambda c: c["world"].pop("catch_all"), "config.world: missing field 'catch_all'"),
    (lambda c: c.__setitem__("allowed", "pypi.org"), "config.allowed: expected a list, got str"),
])  # fmt: skip
def test_a_proxy_config_that_is_not_exactly_one_is_refused_with_its_path(change: Any, says: str) -> None:
    value = json.loads(configs.dump_config(PROXY))
    change(value)
    with pytest.raises(ConfigError) as caught:
        configs.parse_config(ProxyConfig, value, "proxy.json")
    assert says in str(caught.value) and str(caught.value).startswith("proxy.json: ")


def test_defaults_may_be_left_out_and_the_command_line_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "internet.json"
    path.write_text(json.dumps({"hosts": ["pypi.org"], "serves": {"pypi.org": [443]}, "out_dir": str(tmp_path / "out"), "nonce": "n"}))
    started = configs.read_command_line([str(path)], "internet.py", InternetConfig)
    assert started is not None
    _, config, out_dir = started
    assert config.tcp_ports == () and config.catch_all is None and config.bind == "0.0.0.0"
    assert out_dir == str(tmp_path / "out") and (tmp_path / "out").is_dir()
    path.write_text(json.dumps({"hosts": ["pypi.org"], "serves": {"pypi.org": [443]}, "out_dir": "o", "nonce": 7}))
    with pytest.raises(SystemExit, match="config.nonce: expected str, got int"):
        configs.read_command_line([str(path)], "internet.py", InternetConfig)
    path.write_text("{")
    with pytest.raises(SystemExit, match="not JSON"):
        configs.read_command_line([str(path)], "internet.py", InternetConfig)
    assert configs.read_command_line([], "internet.py", InternetConfig) is None


def test_a_runs_lists_for_a_warm_proxy_are_one_typed_record_too() -> None:
    from grader.protocol import codec

    lists = configs.AllowLists(allowed=("pypi.org",), denied=("upload.pypi.org",))
    assert codec.decode(configs.AllowLists, json.loads(configs.dump_config(lists)), "policy_file") == lists
    with pytest.raises(codec.CodecError, match=r"policy_file: unknown field\(s\) \['widen'\]"):
        codec.decode(configs.AllowLists, {"allowed": [], "denied": [], "widen": True}, "policy_file")
