"""The services' configs: what the host tells the simulated internet and the egress proxy, as typed records.

Both sides use these definitions: the backends build a ``ProxyConfig`` or an
``InternetConfig`` and write it with ``dump_config`` (the one writer); the
service reads it back with ``read_command_line`` (the one strict reader,
``codec.decode``). Standard library only: copied beside the services in the
images and imported there as the top-level module ``configs`` (on the host,
as ``grader.protocol.configs``); it imports only ``codec`` and ``common``
(the ports).

Strict, because a config decides what the sandbox may reach: an unknown key
(a typo), a missing one, or a wrong type stops the service at start with the
key's path and why. A ``"true"`` where a boolean is due is refused, never
read as False; a port given as a string is refused, never read as another.
What the fields mean beyond their types (every server has its ports, every
port a listener) is each service's to check when it starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, TypeVar

if TYPE_CHECKING:
    from grader.protocol import codec, common
else:
    try:  # in the images: plain scripts side by side
        import codec
        import common
    except ImportError:  # on the host: imported from the package
        from grader.protocol import codec, common

__all__ = ["AllowLists", "ConfigError", "InternetConfig", "ProxyConfig", "WorldPorts", "dump_config", "parse_config", "read_command_line", "read_config"]


class ConfigError(ValueError):
    """A service's config that does not parse; the text names the file, the key's path and why."""


@dataclass(frozen=True)
class WorldPorts:
    """The world's ports as the proxy judges them: which server answers a name, the ports each serves."""

    serves: dict[str, tuple[int, ...]]  # server name: its ports
    wildcard_zones: tuple[str, ...]
    operators: tuple[str, ...]  # domains whose unlisted names do not exist
    catch_all: Optional[str]  # the zone whose server answers every other name; None: NXDOMAIN


@dataclass(frozen=True)
class ProxyConfig:
    """The egress proxy's config (``services/proxy.py``)."""

    allowed: tuple[str, ...]
    dns_server: str
    out_dir: str
    # the world's ports as clients ask for them; required (None only in front of a real DNS server)
    world: Optional[WorldPorts]
    denied: tuple[str, ...] = ()
    # a file of ``AllowLists`` ({"allowed": [...], "denied": [...]}) re-read when it changes
    policy_file: Optional[str] = None
    listen_port: int = common.PROXY_PORT
    dns_port: int = common.DNS_PORT
    # True only behind another proxy that has applied the policy (srt's): every
    # name passes the allowlist. A name no server answers still fails (NXDOMAIN).
    any_host: bool = False
    # {"requested port": port to dial}: when given, no other port is dialed. On
    # the host's loopback the sinks listen on free ports, and any other port
    # there is the host's own service, which a sandbox must never reach.
    upstream_ports: Optional[dict[str, int]] = None
    # which local address to listen on: containers keep 0.0.0.0; host-side runs use 127.0.0.1
    bind: str = "0.0.0.0"


@dataclass(frozen=True)
class InternetConfig:
    """The simulated internet's config (``services/internet.py``)."""

    hosts: tuple[str, ...]
    # {server name: [ports it serves, as this internet listens on them]}; required, so a config
    # that forgot it is refused at start, never read as "every host serves every port"
    serves: dict[str, tuple[int, ...]]
    out_dir: str
    nonce: str
    wildcard_zones: tuple[str, ...] = ()
    extra_names: tuple[str, ...] = ()
    # domains whose unlisted names do not exist (their operators' hosts are listed)
    operators: tuple[str, ...] = ()
    # the zone whose server answers every other name (the attacker's): fail closed; None: NXDOMAIN
    catch_all: Optional[str] = None
    address: Optional[str] = None  # the address every name resolves to; None: this machine's own
    dns_port: int = common.DNS_PORT
    http_port: int = common.HTTP_PORT
    https_port: int = common.HTTPS_PORT
    tcp_ports: tuple[int, ...] = ()
    # which local address to listen on: containers keep 0.0.0.0; host-side runs use 127.0.0.1
    bind: str = "0.0.0.0"


@dataclass(frozen=True)
class AllowLists:
    """A run's lists, handed to a proxy started ahead of need through its ``policy_file`` (``WarmProxy.hand_over``)."""

    allowed: tuple[str, ...]
    denied: tuple[str, ...]


C = TypeVar("C", ProxyConfig, InternetConfig)


def dump_config(config: ProxyConfig | InternetConfig | AllowLists) -> str:
    """A config as the JSON text its service reads: every field, always (the one writer)."""
    return json.dumps(codec.encode(config))


def parse_config(cls: type[C], value: Any, where: str) -> C:
    """A config from its JSON value; ConfigError naming ``where`` (the file), the key and why.

    A key at the top that is unknown or missing is reported with every other
    such key at once; anything deeper, or a wrong type, by its path.
    """
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: the config must be a JSON object")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    missing = [n for n, f in fields.items() if n not in value
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if unknown or missing:
        raise ConfigError(f"{where}: unknown keys {unknown}, missing keys {missing}")
    try:
        return codec.decode(cls, value, "config")
    except codec.CodecError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def read_config(cls: type[C], path: str) -> C:
    """The config in the file ``path``; ConfigError on anything but exactly a ``cls``."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    return parse_config(cls, raw, path)


def read_command_line(argv: list[str] | None, script: str, cls: type[C]) -> tuple[str, C, str] | None:
    """Load the config named on the command line and create its ``out_dir``.

    Returns the config's path, the config and ``out_dir``; None after printing
    the usage line, when the command line is not exactly one path. A config
    that does not parse stops the service (``SystemExit`` with the reason).
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python3 {script} CONFIG.json", file=sys.stderr)
        return None
    try:
        config = read_config(cls, args[0])
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None
    os.makedirs(config.out_dir, mode=0o755, exist_ok=True)
    return args[0], config, config.out_dir
