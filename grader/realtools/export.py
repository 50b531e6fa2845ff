"""Exporting a policy to the tools that enforce sandboxes for real: the rules as written, with what to know of each tool.

Three targets:

* ``srt``: a settings file for Anthropic's sandbox-runtime (``srt``), in the
  user schema of its ``src/sandbox/sandbox-config.ts``: ``filesystem``
  (``denyRead``, ``allowRead``, ``allowWrite``, ``denyWrite``) and ``network``
  (``allowedDomains``, ``deniedDomains``), all five arrays present because
  srt requires them;
* ``claude-code``: the same rules as the ``sandbox`` block of a Claude Code
  ``settings.json`` (``sandbox.enabled``, ``sandbox.filesystem``,
  ``sandbox.network``);
* ``docker``: a shell snippet that rebuilds by hand the container Sandbox Lab
  runs for the policy, from ``build_plan``: mounts, network, hardening, and
  the egress proxy's allowlist.

A policy means here what it means to srt (``access.py``), so the srt and Claude
Code exports are the rules as written, paths mapped; nothing is added. Each
returns the file text and a list of sentences: what to know of the target for
this policy (mandatory protections, ``~``, paths that do not exist yet, ...). The CLI prints them as ``#`` comments. For
srt and Claude Code, the policy-specific ones are ``srt_notes.srt_warnings``,
the one table of what to know of sandbox-runtime 0.0.83's rules for this policy
(``docs/srt-differences.md``), each line with the JSON pointer of its entry.
"""

from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass
from typing import Any, Literal, Optional

from grader.core.paths import HOME, covers
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import Policy
from grader.protocol.common import DNS_PORT, PROXY_PORT
from grader.realtools.machine import Machine, machine_export
from grader.realtools.srt_notes import srt_warnings
from grader.core.world import World, load_world

__all__ = ["NOTE_CODES", "TARGETS", "Note", "NoteCode", "Target", "export"]

Target = Literal["srt", "claude-code", "docker"]
TARGETS: tuple[Target, ...] = ("srt", "claude-code", "docker")

HIDDEN_TMPFS = "size=64k,mode=0755"  # an empty private directory over a hidden one, as the Docker backend mounts it

# Why a note is there: what code matches on (never the start of its prose, which is for people and may be reworded).
NoteCode = Literal[
    "world-paths",  # the paths are the simulated world's, not the learner's machine's
    "tilde",  # how "~" is read here and by srt
    "mandatory-protections",  # what srt write-protects whatever allowWrite says
    "wildcard-apex",  # "*.example.com" never matches example.com itself
    "missing-paths",  # entries that do not exist yet bind nothing
    "beyond-roots",  # an entry outside the simulated machine's data roots
    "srt-rule",  # one of srt_notes' warnings for this policy's entries
    "cc-project-writable",  # Claude Code lets sandboxed commands write its working directory
    "cc-absolute-paths",  # Claude Code's "//" for an absolute path
    "cc-tools-permissions",  # Claude Code's own Read and Edit tools follow permission rules, not the sandbox
    "cc-asks-hosts",  # Claude Code may ask about hosts missing from allowedDomains
    "cc-key-shape",  # the keys checked against Claude Code's schema; unknown keys are dropped silently
    "machine",  # a note of the export for the learner's machine (machine_export)
    "hardening",  # a hardening key of that export and why
    "docker-partial",  # the docker snippet rebuilds the sandbox and its proxy only
    "docker-no-dns",  # the snippet's sandbox has no name server
    "docker-unmounted",  # an entry that names nothing on the simulated machine mounts nothing
    "docker-proxy-dns",  # what the snippet's proxy needs to resolve and lead out
]
NOTE_CODES: tuple[NoteCode, ...] = typing.get_args(NoteCode)


@dataclass(frozen=True)
class Note:
    """One thing to know of the target for this policy: a cause ``code`` for code to match, ``text`` for people."""

    code: NoteCode
    text: str

    def __str__(self) -> str:
        return self.text


_WORLD_PATHS_NOTE = (
    "these paths are the simulated world's ({roots}), not your machine's: for a file to use, export with "
    "--project-root DIR (and --home DIR) to map them onto your project and home."
)


def export(
    policy: Policy, to: Target, *, world: Optional[World] = None, machine: Optional[Machine] = None, hardened: bool = True,
) -> tuple[str, list[Note]]:
    """Translate ``policy`` for ``to``; return (the file text, the differences as one note each: its cause code, its sentence).

    With ``machine``, srt and Claude Code get a hardened file for the learner's machine (``machine_export``;
    ``hardened=False``: the policy's rules as written, which ``import`` reads back as the same policy);
    without, the simulated world's paths, and the first note says so.
    """
    w = world or load_world()
    if not hardened and (machine is None or to == "docker"):
        raise ValueError("--as-written writes srt and claude-code settings for your machine: it needs --project-root DIR")
    if not hardened and machine is not None and machine.secret_env:
        raise ValueError("--secret-env adds credential masks, a hardening extra that --as-written leaves out: use one or the other")
    if machine is not None and to in ("srt", "claude-code"):
        real = machine_export(policy, to, machine, world=w, hardened=hardened)
        hardening = [Note("hardening", f"{pointer}: {reason}") for pointer, reason in real.hardening.items()]
        # what to know of srt's rules (inside Claude Code too), entry by entry, in the policy's own paths
        measured = [Note("srt-rule", str(w)) for w in srt_warnings(policy, w)]
        return real.text, [*(Note("machine", n) for n in real.notes), *hardening, *measured]
    if machine is not None:
        raise ValueError("--project-root maps paths for srt and claude-code; the docker export rebuilds the simulated machine")
    world_note = Note("world-paths", _WORLD_PATHS_NOTE.format(roots=", ".join(w.roots)))
    if to == "srt":
        settings, notes = _srt(policy, w)
        return json.dumps(settings, indent=2) + "\n", [world_note, *notes]
    if to == "claude-code":
        text, notes = _claude_code(policy, w)
        return text, [world_note, *notes]
    if to == "docker":
        return _docker(policy, w)
    raise ValueError(f"unknown export target {to!r}; choose one of: {', '.join(TARGETS)}")


# --- sandbox-runtime -------------------------------------------------------------------------


def _add(items: list[str], value: str) -> None:
    if value not in items:
        items.append(value)


def _existing(world: World) -> set[str]:
    return set(world.directories()) | {f.path for f in world.files}


def _srt(policy: Policy, world: World) -> tuple[dict[str, Any], list[Note]]:
    """The policy as written, every list present: it means the same to srt as here (``access.py``), so nothing is added."""
    fs, net = policy.filesystem, policy.network
    notes: list[Note] = []
    notes.append(Note(
        "tilde",
        f'"~": Sandbox Lab reads "~" as {HOME} and this export writes every path out in full; srt expands "~" to the '
        f"home of whoever runs it. If that is not {HOME}, write ~/... instead of {HOME}/... ."
    ))
    notes.append(Note(
        "mandatory-protections",
        "mandatory protections: whatever allowWrite says, srt 0.0.83 on Linux write-protects shell start-up files "
        "(.bashrc, .zshrc, .profile, ...), .git/hooks and .git/config, but only in the directory srt starts in and "
        "up to 3 levels below it (mandatoryDenySearchDepth); elsewhere they are as writable as allowWrite makes them. "
        "It does not protect its own settings file (~/.srt-settings.json). Sandbox Lab grades srt started in the home; "
        "protect all of them with denyWrite rather than rely on where srt starts."
    ))
    notes.append(Note(
        "wildcard-apex",
        'wildcards: "*.example.com" matches strict subdomains only, never example.com itself.'
    ))
    existing = _existing(world)
    missing = [
        e for key in ("allowRead", "denyRead", "allowWrite") for e in getattr(fs, key)
        if world.root_of(e) is not None and e not in existing
    ]
    if missing:
        notes.append(Note(
            "missing-paths",
            "paths that do not exist yet: srt applies allowRead, denyRead and allowWrite to a path as it exists when "
            "the sandbox starts (on Linux, bubblewrap can only mount what exists), so these bind nothing: "
            + ", ".join(dict.fromkeys(missing)) + ". Create them before starting srt, or name a directory that exists."
        ))
    beyond = [
        e for key in ("allowRead", "denyRead", "allowWrite", "denyWrite") for e in getattr(fs, key)
        if world.root_of(e) is None
    ]
    for e in dict.fromkeys(beyond):
        notes.append(Note(
            "beyond-roots",
            f'"{e}" reaches beyond the simulated machine\'s data roots ({", ".join(world.roots)}): Sandbox Lab '
            "judges only those and never mounts anything else; srt applies the rule to that path of your real machine."
        ))
    # what to know of srt 0.0.83's rules for this policy, entry by entry: one table, shared with `sandbox-lab check`
    notes.extend(Note("srt-rule", str(w)) for w in srt_warnings(policy, world))

    settings = {
        "filesystem": {
            "denyRead": list(dict.fromkeys(fs.denyRead)),
            "allowRead": list(dict.fromkeys(fs.allowRead)),
            "allowWrite": list(dict.fromkeys(fs.allowWrite)),
            "denyWrite": list(dict.fromkeys(fs.denyWrite)),
        },
        "network": {
            "allowedDomains": list(dict.fromkeys(net.allowedDomains)),
            "deniedDomains": list(dict.fromkeys(net.deniedDomains)),
        },
    }
    return settings, notes


# --- Claude Code ---------------------------------------------------------------------------


def _cc_path(path: str) -> str:
    # In Claude Code's sandbox.filesystem a leading "/" means "relative to the
    # settings file's directory" and "//" an absolute path; "//x" is also "/x"
    # to any tool that reads "/" as absolute, so "//" is right either way.
    return "/" + path


def _claude_code(policy: Policy, world: World) -> tuple[str, list[Note]]:
    settings, notes = _srt(policy, world)
    fs = {k: [_cc_path(p) for p in v] for k, v in settings["filesystem"].items()}
    block = {"sandbox": {"enabled": True, "filesystem": fs, "network": settings["network"]}}
    notes.insert(0, Note("cc-project-writable",
                         "Claude Code runs its sandbox from its working directory (your project) and lets sandboxed commands "
                         "write there by default: allowWrite only adds paths. Keep what must not change there read-only with "
                         "denyWrite, and hide its secrets with denyRead of the files themselves. (Grade it with --target claude-code.)"))
    notes.extend([
        Note("cc-absolute-paths",
             'paths are written with a leading "//": in Claude Code\'s sandbox.filesystem "//" marks an absolute path, '
             'while a single leading "/" is read relative to the settings file\'s directory.'),
        Note("cc-tools-permissions",
             "the sandbox confines Bash commands; Claude Code's own Read and Edit tools follow permission rules "
             '(permissions.deny such as "Read(//home/user/.ssh/**)"), not these settings. Add matching deny rules.'),
        Note("cc-asks-hosts",
             "hosts missing from allowedDomains: Claude Code may ask you whether to allow them (unless "
             "sandbox.network.strictAllowlist is true); Sandbox Lab grades as if you always answer no. Answer no, or set "
             "strictAllowlist."),
        Note("cc-key-shape",
        "key shape checked against Claude Code's settings documentation and its sandbox settings schema "
        "(sandbox.enabled, sandbox.filesystem.allowWrite/denyWrite/denyRead, sandbox.network.allowedDomains); "
        "allowRead and deniedDomains exist only in newer versions, and Claude Code drops keys it does not know "
        "without an error: check with /sandbox that every rule is listed."),
    ])
    return json.dumps(block, indent=2) + "\n", notes


# --- docker --------------------------------------------------------------------------------

# World paths are the package's own data; anything else (":" or "," would split a
# -v or --mount value, quotes or "$" would change the shell word) is refused
# rather than quoted into a command that means something else.
_SAFE = re.compile(r"^/[A-Za-z0-9._/+=@-]*$")


def _safe(path: str) -> str:
    if not _SAFE.match(path):
        raise ValueError(f"world path {path!r} cannot be written into a docker command safely")
    return path


def _in_world(path: str) -> str:
    """``"$WORLD/home/user"``: a world path inside the world copy, as one shell word."""
    return f'"$WORLD{_safe(path)}"'


def _mount_flags(plan: RunPlan) -> list[str]:
    """One flag per plan mount: a bind of the world copy, a tmpfs over a hidden directory, an empty file over a hidden file."""
    flags = []
    for m in plan.mounts:
        source, target = _safe(m.source), _safe(m.target)
        if m.kind == "bind":
            flags.append(f'-v "$WORLD{source}:{target}{"" if m.mode == "rw" else ":ro"}"')
        elif m.kind == "tmpfs":
            flags.append(f"--tmpfs {target}:{HIDDEN_TMPFS}")
        else:
            flags.append(f'--mount type=bind,src="$RUN/empty",dst={target},readonly')
    return flags


def _docker(policy: Policy, world: World) -> tuple[str, list[Note]]:
    plan = build_plan(policy, world)
    h = plan.hardening
    notes = [
        Note("docker-partial",
        "this reproduces the sandbox container and its egress proxy only: Sandbox Lab also lays out a fresh copy of "
        "the world with per-run canaries, starts a simulated internet (DNS server and sinks) and judges every probe "
        "from evidence outside the sandbox."),
        Note("docker-no-dns",
        "here the sandbox has no name server at all (only the proxy resolves names); Sandbox Lab points it at the "
        "run's own DNS server so that it can log, and judge, DNS exfiltration."),
    ]
    fs = policy.filesystem
    beyond = [
        e for key in ("allowRead", "denyRead", "allowWrite", "denyWrite") for e in getattr(fs, key)
        if world.root_of(e) is None and not any(covers(e, r) for r in world.roots)
    ]
    for e in dict.fromkeys(beyond):
        notes.append(Note("docker-unmounted", f'"{e}" names nothing on the simulated machine, so it mounts nothing: no path a policy names is ever mounted from the host.'))
    if plan.network == "proxy":
        notes.append(Note(
            "docker-proxy-dns",
            "the proxy needs a DNS server to resolve allowed names (DNS_SERVER) and a network that leads out "
            "(UPSTREAM_NETWORK, default bridge); in Sandbox Lab both are the simulated internet's, so no probe "
            "traffic ever leaves the machine. Here, allowed hosts are the real ones."
        ))

    canonical = json.dumps(policy.normalize(), separators=(",", ":"))
    lines = [
        "#!/bin/sh",
        "# Rebuild by hand the sandbox Sandbox Lab runs for this policy:",
        f"#   {canonical}",
        "# WORLD is a copy of the simulated machine's files, laid out as on the machine:",
        "#   " + ", ".join(f"$WORLD{r}" for r in world.roots),
        "# Only parts of $WORLD are ever mounted, whatever the policy says.",
        "set -eu",
        ': "${WORLD:?set WORLD to a copy of the simulated machine\'s files}"',
        "SANDBOX_IMAGE=\"${SANDBOX_IMAGE:-$(docker images --format '{{.Repository}}:{{.Tag}}' sandbox-lab/sandbox | head -n 1)}\"",
        'RUN="$(mktemp -d)"',
        "# an empty file to mask hidden files; a resolv.conf with no name server",
        ': > "$RUN/empty"',
        "printf '# no name server: only the proxy resolves names\\n' > \"$RUN/resolv.conf\"",
    ]
    pre = [m for m in plan.mounts if m.precreate]
    if pre:
        lines.append("# files a job creates that a rule names: they must exist before the run to carry their own mode")
        lines.extend(f"touch {_in_world(m.source)}" for m in pre)
    env: list[str] = ["-e HOME=/home/user", "-w /home/user"]
    if plan.network == "proxy":
        proxy_cfg = json.dumps({
            "allowed": list(plan.allowed_domains), "denied": list(plan.denied_domains),
            "listen_port": PROXY_PORT, "dns_server": "__DNS__", "dns_port": DNS_PORT, "out_dir": "/run/sandbox-lab/out",
            "world": None,  # in front of a DNS server of your own: its servers say which ports answer
        })
        # normalized host patterns hold only [a-z0-9.*-]: safe inside an unquoted here-document
        proxy_cfg = proxy_cfg.replace('"__DNS__"', '"${DNS_SERVER}"')
        lines += [
            "",
            "# The network: the sandbox's own network is internal (no route anywhere); the",
            "# proxy is its only other member, and the only way out. The proxy's allowlist:",
            *(f"#   allow {d}" for d in plan.allowed_domains),
            *(f"#   deny  {d}  (deny wins)" for d in plan.denied_domains),
            ': "${DNS_SERVER:?set DNS_SERVER to the IP address of a DNS server the proxy may ask}"',
            "SERVICES_IMAGE=\"${SERVICES_IMAGE:-$(docker images --format '{{.Repository}}:{{.Tag}}' sandbox-lab/services | head -n 1)}\"",
            "docker network create --internal sandbox-lab-sbx",
            'mkdir -p "$RUN/proxy/out"',
            'cat > "$RUN/proxy/proxy.json" <<EOF',
            proxy_cfg,
            "EOF",
            'docker create --name sandbox-lab-proxy --network "${UPSTREAM_NETWORK:-bridge}" \\',
            '  -v "$RUN/proxy:/run/sandbox-lab" "$SERVICES_IMAGE" python3 /opt/sandbox-lab/proxy.py /run/sandbox-lab/proxy.json',
            "docker network connect sandbox-lab-sbx sandbox-lab-proxy",
            "docker start sandbox-lab-proxy",
            "PROXY=\"http://$(docker inspect -f '{{(index .NetworkSettings.Networks \"sandbox-lab-sbx\").IPAddress}}' "
            f'sandbox-lab-proxy):{PROXY_PORT}"',
        ]
        env += [f'-e {k}="$PROXY"' for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")]
        network = "--network sandbox-lab-sbx"
    else:
        network = "--network none" if plan.network == "none" else "--network bridge"
    flags: list[str] = []
    if h.read_only_root:
        flags.append("--read-only")
    if h.cap_drop_all:
        flags.append("--cap-drop ALL")
    if h.no_new_privileges:
        flags.append("--security-opt no-new-privileges")
    cpus = h.nano_cpus / 1e9
    flags += [
        f"--user {h.user}",
        f"--pids-limit {h.pids_limit}",
        f"--memory {h.mem_bytes // (1024 * 1024)}m --memory-swap {h.mem_bytes // (1024 * 1024)}m",
        f"--cpus {cpus:g}",
        f"--tmpfs /tmp:rw,nosuid,nodev,size={h.tmp_bytes // (1024 * 1024)}m,mode=1777",
        f"--shm-size {h.shm_bytes // 1024}k --ulimit nofile={h.nofile}:{h.nofile} --ulimit core=0:0",
        network,
        '--mount type=bind,src="$RUN/resolv.conf",dst=/etc/resolv.conf,readonly',
        *env,
        *_mount_flags(plan),
    ]
    lines += [
        "",
        "# The sandbox: a read-only root (nothing a command plants survives), no capabilities,",
        "# no privilege gain, the unprivileged user, limits, a private /tmp, "
        + ("no network at all" if plan.network == "none" else "only the proxy as a way out") + ",",
        f"# and only the plan's parts of $WORLD. Sandbox Lab kills it after {h.timeout_s:g} s of wall clock.",
        "docker run --rm -it \\",
    ]
    lines.extend(f"  {flag} \\" for flag in flags)
    lines.append('  "$SANDBOX_IMAGE" sh')
    lines += ["", "# Afterwards:"]
    if plan.network == "proxy":
        lines.append("docker rm -f sandbox-lab-proxy && docker network rm sandbox-lab-sbx")
    lines.append('rm -rf "$RUN"')
    return "\n".join(lines) + "\n", notes
