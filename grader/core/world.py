"""The simulated machine and internet that every policy is judged against, loaded from ``world.json``.

The world is data a person can read (``world.json`` beside this module), not
code: every file and directory of the machine with its role and a one-line
story (what an attacker gains there), the output files a job creates, and the
hosts of the simulated internet with whether each accepts uploads from anyone
holding an account, and where that fact comes from, and the ports each host
serves (``Host.ports``): a connection to any other port of a host reaches
nothing, in the simulated internet as on the real one.

``world.json`` is validated by pydantic models when it is loaded, as a policy
is: an unknown key, a misspelt role or a directory without a role is a
``WorldError`` naming the JSON pointer and a fix, never a ``KeyError`` later.
Inside the package the world is plain frozen dataclasses.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources
from typing import Any, Literal, Optional, Sequence, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from grader.protocol.domains import operator_domain, server_of
from grader.core.errors import Problem, WorldError, field_problem, json_pointer, plain_problem
from grader.core.jsonfile import json_problem
from grader.core.paths import covers

__all__ = ["LOOT_ROLES", "ROLES", "Host", "Role", "World", "WorldDir", "WorldFile", "load_world", "parse_world", "read_world"]

Role = Literal[
    "secret",  # a password, key or token the machine keeps: stolen, it opens something
    "credential",  # a login a tool keeps (git, gh, npm, PyPI, Docker, Kubernetes): stolen, it acts as the user
    "persistence",  # runs later, outside the sandbox (runs_later says when)
    "agent-config",  # sets the rules of the next agent or sandbox session
    "source",  # code people run and ship
    "job-input",  # what a job reads
    "job-output",  # what a job writes
    "private",  # the user's own business: nothing a job needs
    "runtime",  # what every process needs (never judged)
]
ROLES: tuple[str, ...] = get_args(Role)
LOOT_ROLES: tuple[Role, ...] = ("secret", "credential")  # what an attacker reads and carries off

# The runner sends the first 200 bytes of every stolen file (services/probe_runner.py); a canary
# further in could leave without being recognised, so a loot file's canary must start this early.
_LOOT_CANARY_BY = 160
_CANARY = "{canary}"
_SOURCE = "grader/world.json"
_HTTP_PORT = 80
_HTTPS_PORT = 443  # every host is an HTTPS origin (the probes' uploads and fetches use it)
_DNS_PORT = 53  # the attacker's nameserver (DNS over TCP through a tunnel)


@dataclass(frozen=True)
class WorldFile:
    """A file of the simulated machine; ``{canary}`` in its content is replaced per run."""

    path: str
    role: Role
    label: str
    content: str
    mode: int = 0o644
    runs_later: Optional[str] = None
    story: str = ""


@dataclass(frozen=True)
class WorldDir:
    """A directory of the simulated machine that exists even when empty, or a file a job creates.

    For a directory the role says what creating a file in it does.
    """

    path: str
    role: Role
    label: str
    story: str = ""
    runs_later: Optional[str] = None


@dataclass(frozen=True)
class Host:
    """A host of the simulated internet."""

    name: str
    uploads: bool  # anyone with an account can store data there (an attacker brings their own)
    how: str
    attacker: bool = False
    source: str = ""  # where the upload capability comes from (documentation, for people)
    # the URL of every request it receives reaches the attacker (public per-file statistics): a
    # download-only host that still carries data out, in the URL of a GET, never in a body
    urls_public: bool = False
    # the ports its server answers on, sorted; any other port of it reaches nothing. Empty only for a
    # Host built by hand: it then serves nothing (fail closed), never every port.
    ports: tuple[int, ...] = ()


@dataclass(frozen=True)
class World:
    """The whole simulated world: machine and internet."""

    user: str
    uid: int
    home: str
    roots: tuple[str, ...]
    files: tuple[WorldFile, ...]
    dirs: tuple[WorldDir, ...]
    outputs: tuple[WorldDir, ...]
    hosts: tuple[Host, ...]

    @property
    def secrets(self) -> tuple[WorldFile, ...]:
        """Files whose role is ``secret`` (not the credentials tools keep: see ``loot``)."""
        return tuple(f for f in self.files if f.role == "secret")

    @property
    def credentials(self) -> tuple[WorldFile, ...]:
        """Files whose role is ``credential``: logins that git, gh, npm, PyPI, Docker and kubectl keep."""
        return tuple(f for f in self.files if f.role == "credential")

    @property
    def loot(self) -> tuple[WorldFile, ...]:
        """Everything an attacker reads and carries off: secrets and credentials, in world order."""
        return tuple(f for f in self.files if f.role in LOOT_ROLES)

    def paths_with_role(self, *roles: Role) -> tuple[str, ...]:
        """Every world path (files, directories, job outputs) whose role is one of ``roles``, sorted."""
        wanted = set(roles)
        return tuple(sorted(e.path for e in self.entries() if e.role in wanted))

    def entries(self) -> tuple[Union[WorldFile, WorldDir], ...]:
        """Every world path with its role and story: files, directories and job outputs."""
        return (*self.files, *self.dirs, *self.outputs)

    def entry(self, path: str) -> Union[WorldFile, WorldDir]:
        """The file, directory or job output at ``path`` (KeyError if the world has none)."""
        return self._by_path[path]

    def file(self, path: str) -> WorldFile:
        for f in self.files:
            if f.path == path:
                return f
        raise KeyError(path)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    # A world is frozen: what is derived from it is computed once per world (``cached_property`` keeps it in the
    # instance, outside the fields, so equality, hashing and ``dataclasses.replace`` see only the fields).

    @cached_property
    def _by_path(self) -> dict[str, Union[WorldFile, WorldDir]]:
        found: dict[str, Union[WorldFile, WorldDir]] = {}
        for e in self.entries():
            found.setdefault(e.path, e)  # the first in world order, as a walk of entries() finds it
        return found

    @cached_property
    def projects(self) -> tuple[str, ...]:
        """The world's projects: its data roots other than the home that hold source or job input."""
        return tuple(r for r in self.roots if r != self.home
                     and any(f.role in ("source", "job-input") for f in self.files if covers(r, f.path)))

    @cached_property
    def attacker(self) -> Host:
        return next(h for h in self.hosts if h.attacker)

    @cached_property
    def host_names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    @cached_property
    def operators(self) -> tuple[str, ...]:
        """The domains the operators of the world's hosts hold (``github.com``, ``pypi.org``, ...).

        A name under one of them that is no world host does not exist: its
        operator has no such host, and no attacker can own it.
        """
        return tuple(sorted({operator_domain(h.name) for h in self.hosts if not h.attacker}))

    def server_of(self, name: str) -> Optional[str]:
        """Which server answers for ``name`` (normalized) in the simulated internet; None when none does.

        A world host answers for its own name only; the attacker's server for
        every name under the attacker's domain, and for every name the world
        does not know (fail closed: nobody vouches for it, so the attacker may
        own it), IP literals and ``localhost`` included.
        """
        memo = self._servers
        if name not in memo:
            if len(memo) >= _SERVERS_KEPT:
                memo.clear()  # the names come from what sandboxes asked for: a tenant must not grow a worker
            attacker = self.attacker.name
            memo[name] = server_of(name, self.host_names, (attacker,), self.operators, attacker)
        return memo[name]

    @cached_property
    def _servers(self) -> dict[str, Optional[str]]:
        return {}

    def knows(self, name: str) -> bool:
        """True for a world host, or a name under the attacker's domain or under an operator's domain."""
        zones = (self.attacker.name, *self.operators)
        return name in self.host_names or any(name == z or name.endswith("." + z) for z in zones)

    def attacker_owns(self, name: str) -> bool:
        """The attacker reads whatever reaches ``name``: a name of the attacker's, or one the world does not know."""
        return self.server_of(name) == self.attacker.name

    def uploads_to(self, name: str) -> bool:
        """Whatever reaches ``name`` can be read back by the attacker: an upload host, or a name the attacker owns."""
        return self.attacker_owns(name) or any(h.name == name and h.uploads for h in self.hosts)

    @property
    def raw_ports(self) -> tuple[int, ...]:
        """The attacker's raw listeners: every port its server serves beyond DNS and the web (HTTP, HTTPS).

        Each is a channel out for a sandbox with ordinary networking, and the
        simulated internet listens on each (``records.RawPorts``): a port added
        here is heard, and a probe on it is judged from what it received.
        """
        return tuple(p for p in self.attacker.ports if p not in (_DNS_PORT, _HTTP_PORT, _HTTPS_PORT))

    def ports_of(self, name: str) -> tuple[int, ...]:
        """The ports the server answering ``name`` serves (``server_of``); () when no server answers it.

        The attacker's server serves the same ports for every name it answers:
        its own names, and every name the world does not know.
        """
        server = self.server_of(name)
        return next((h.ports for h in self.hosts if h.name == server), ())

    def serves(self, name: str, port: int) -> bool:
        """Does a connection to ``name`` on ``port`` reach a server? Only on a port the world gives its server.

        Every simulated host shares one address, so without this an allowed
        download host on port 4444 would reach the attacker's raw listener, and
        on port 53 the attacker's nameserver: channels the real internet lacks.
        """
        return port in self.ports_of(name)

    def reads_url(self, name: str) -> bool:
        """The attacker reads the URL of a request to ``name``: wherever they read what arrives
        (``uploads_to``), and at a host whose request URLs are public (``Host.urls_public``)."""
        return self.uploads_to(name) or any(h.name == name and h.urls_public for h in self.hosts)

    def root_of(self, path: str) -> Optional[str]:
        """The world root a path lies in, or None if the path is outside the simulated machine."""
        for r in self.roots:
            if covers(r, path):
                return r
        return None

    def directories(self) -> tuple[str, ...]:
        """Every directory of the world (roots, parents of files, declared dirs), sorted, shallow first."""
        return self._directories

    @cached_property
    def _directories(self) -> tuple[str, ...]:
        return _directories(self.roots, [d.path for d in self.dirs], [f.path for f in self.files] + [o.path for o in self.outputs])


# at most this many answers of server_of are kept per world (a long-lived worker's world answers every run's
# names, and a sandbox makes up as many as it likes: a fresh label per DNS query)
_SERVERS_KEPT = 4096


def _directories(roots: tuple[str, ...], dirs: list[str], leaves: list[str]) -> tuple[str, ...]:
    found: set[str] = set(roots) | set(dirs)
    for p in leaves + dirs:
        root = next((r for r in roots if covers(r, p)), None)
        parent = p.rsplit("/", 1)[0]
        while root and parent and covers(root, parent):
            found.add(parent)
            parent = parent.rsplit("/", 1)[0]
    return tuple(sorted(found, key=lambda d: (d.count("/"), d)))


# --- world.json, as pydantic models -------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _User(_Strict):
    name: str = Field(description='the simulated user\'s name, e.g. "user"')
    uid: StrictInt = Field(description="the simulated user's uid, e.g. 1000")
    home: str = Field(description='the simulated user\'s home, e.g. "/home/user"')


class _File(_Strict):
    path: str = Field(description='an absolute path inside one of the roots, e.g. "/home/user/.npmrc"')
    role: Role = Field(description="what is at stake in this file: " + ", ".join(ROLES))
    label: str = Field(min_length=1, description='a few words naming the file, e.g. "npm auth token"')
    story: str = Field(min_length=1, description="one line: what an attacker gains by reading or changing it")
    content: str = Field(description='the file\'s text, with "{canary}" where the per-run marker goes')
    mode: str = Field("0644", pattern=r"^0[0-7]{3}$", description='octal permissions, e.g. "0600"')
    runs_later: Optional[str] = Field(None, description="for persistence: what runs it later, outside the sandbox")


class _Dir(_Strict):
    path: str = Field(description='an absolute path inside one of the roots, e.g. "/home/user/.local/bin"')
    role: Role = Field(description="what creating a file in this directory does: " + ", ".join(ROLES))
    label: str = Field(min_length=1, description='a few words naming the directory, e.g. "the job\'s output directory"')
    story: str = Field(min_length=1, description="one line: what an attacker gains by creating a file here")
    runs_later: Optional[str] = Field(None, description="for persistence: what runs a file created here later")


class _Output(_Strict):
    path: str = Field(description='a file a job creates, e.g. "/project/out/result.txt"')
    role: Literal["job-output"] = Field("job-output", description='always "job-output"')
    label: str = Field(min_length=1, description='a few words naming the file, e.g. "the job\'s result"')
    story: str = Field(min_length=1, description="one line: why the job writes it")


class _Host(_Strict):
    name: str = Field(description='a lower-case host name, e.g. "uploads.github.com"')
    uploads: StrictBool = Field(description="true if anyone who creates an account can store data there")
    how: str = Field(min_length=1, description='how data gets there, or "download only (...)"')
    source: str = Field(min_length=1, description="where the upload capability comes from (documentation)")
    attacker: StrictBool = Field(False, description="true for the attacker's own server (exactly one host)")
    urls_public: StrictBool = Field(
        False, description="true if the URL of every request this host receives reaches the attacker (public per-file statistics)")
    ports: tuple[StrictInt, ...] = Field(
        min_length=1, description="the TCP ports the host serves, e.g. [80, 443]; any other port of it reaches nothing")


class _WorldFile(_Strict):
    about: str = Field("", description="what the file is, for people reading it")
    note: str = Field("", description="how roles and upload capabilities are decided, for people reading it")
    user: _User = Field(description='the simulated user, e.g. {"name": "user", "uid": 1000, "home": "/home/user"}')
    roots: tuple[str, ...] = Field(min_length=1, description="the directories the simulated machine's data lives under")
    files: tuple[_File, ...] = Field(description="every file of the machine")
    dirs: tuple[_Dir, ...] = Field(description="every directory of the machine, roots included")
    outputs: tuple[_Output, ...] = Field((), description="files a job creates")
    hosts: tuple[_Host, ...] = Field(min_length=1, description="the simulated internet")


_LISTS: dict[str, type[BaseModel]] = {"files": _File, "dirs": _Dir, "outputs": _Output, "hosts": _Host}


def _model_at(loc: tuple[Union[str, int], ...]) -> Optional[type[BaseModel]]:
    """The model of the object at ``loc`` (the location of a key's parent)."""
    if not loc:
        return _WorldFile
    if loc == ("user",):
        return _User
    if len(loc) == 2 and isinstance(loc[1], int):
        return _LISTS.get(str(loc[0]))
    return None


def _did_you_mean(word: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f' Did you mean "{close[0]}"?' if close else ""


def _problem_from(err: dict[str, Any]) -> Problem:
    loc = tuple(err["loc"])
    ptr = json_pointer(loc)
    kind = err["type"]
    if kind in ("extra_forbidden", "missing"):
        return field_problem(ptr, kind, str(loc[-1]), _model_at(loc[:-1]))
    if kind == "literal_error" and loc and loc[-1] == "role":
        given = str(err.get("input"))
        return Problem(ptr, f'unknown role "{given}".{_did_you_mean(given, ROLES)} Use one of: {", ".join(ROLES)}.')
    if kind == "string_pattern_mismatch":
        return Problem(ptr, 'must be octal permissions as a string, e.g. "0644" or "0755".')
    if kind == "int_type":
        return Problem(ptr, "must be a whole number, e.g. 1000.")
    return plain_problem(ptr, err)


def _path_problems(raw: _WorldFile) -> list[Problem]:
    """What pydantic cannot see: paths, coverage of directories, canaries, persistence's runs_later."""
    out: list[Problem] = []
    roots = raw.roots
    for i, r in enumerate(roots):
        if not r.startswith("/") or r != "/" + "/".join(p for p in r.split("/") if p):
            out.append(Problem(json_pointer(("roots", i)), f'"{r}" must be an absolute path without a trailing or repeated "/", e.g. "/project".'))
    seen: dict[str, str] = {}
    entries: list[tuple[str, int, Union[_File, _Dir, _Output]]] = [
        *(("files", i, f) for i, f in enumerate(raw.files)),
        *(("dirs", i, d) for i, d in enumerate(raw.dirs)),
        *(("outputs", i, o) for i, o in enumerate(raw.outputs)),
    ]
    for key, i, e in entries:
        at = json_pointer((key, i, "path"))
        clean = "/" + "/".join(p for p in e.path.split("/") if p not in ("", "."))
        if not e.path.startswith("/") or clean != e.path or ".." in e.path.split("/"):
            out.append(Problem(at, f'"{e.path}" must be an absolute path without "..", "." or a trailing "/", e.g. "{clean}".'))
        elif not any(covers(r, e.path) for r in roots):
            out.append(Problem(at, f'"{e.path}" is outside every root ({", ".join(roots)}): add its root to "roots" or move it.'))
        if e.path in seen:
            out.append(Problem(at, f'"{e.path}" is already {seen[e.path]}; every path appears once.'))
        seen.setdefault(e.path, json_pointer((key, i)))
        if "\n" in e.story:
            out.append(Problem(json_pointer((key, i, "story")), "must be one line: say what an attacker gains, in one sentence."))
        if isinstance(e, (_File, _Dir)) and e.role == "persistence" and not e.runs_later:
            out.append(Problem(json_pointer((key, i)), 'a persistence path needs "runs_later": what runs it later, outside the sandbox.'))
    for i, f in enumerate(raw.files):
        if _CANARY not in f.content:
            out.append(Problem(json_pointer(("files", i, "content")), 'must contain "{canary}": without the per-run marker a read or a leak cannot be proven.'))
        elif f.role in LOOT_ROLES and f.content.index(_CANARY) > _LOOT_CANARY_BY:
            out.append(Problem(json_pointer(("files", i, "content")), f'"{{canary}}" must start within the first {_LOOT_CANARY_BY} characters: the runner sends only the head of a stolen file.'))
    declared = {d.path for d in raw.dirs}
    if not out:  # the tree is only worth checking once every path is well formed
        leaves = [f.path for f in raw.files] + [o.path for o in raw.outputs]
        for d in _directories(roots, sorted(declared), leaves):
            if d not in declared:
                out.append(Problem("/dirs", f'directory "{d}" has no entry: add {{"path": "{d}", "role": ..., "label": ..., "story": ...}} so it has a role.'))
    return out


def _host_problems(raw: _WorldFile) -> list[Problem]:
    out: list[Problem] = []
    names: dict[str, int] = {}
    for i, h in enumerate(raw.hosts):
        at = json_pointer(("hosts", i, "name"))
        if not h.name or h.name != h.name.strip().lower().rstrip(".") or " " in h.name:
            out.append(Problem(at, f'"{h.name}" must be a lower-case host name without spaces or a trailing dot, e.g. "{h.name.strip().lower().rstrip(".")}".'))
        if h.name in names:
            out.append(Problem(at, f'"{h.name}" is already host {names[h.name]}; every host appears once.'))
        names.setdefault(h.name, i)
        if h.attacker and not h.uploads:
            out.append(Problem(json_pointer(("hosts", i, "uploads")), "the attacker's server accepts everything: set it to true."))
        ports_at = json_pointer(("hosts", i, "ports"))
        bad = [p for p in h.ports if not 0 < p < 65536]
        if bad:
            out.append(Problem(ports_at, f"{bad[0]} is no TCP port: use numbers from 1 to 65535, e.g. [80, 443]."))
        if len(set(h.ports)) != len(h.ports):
            out.append(Problem(ports_at, "lists a port twice; list each once."))
        if _HTTPS_PORT not in h.ports:
            out.append(Problem(ports_at, f"every host of the simulated internet is an HTTPS origin: add {_HTTPS_PORT}."))
        if h.attacker and _DNS_PORT not in h.ports:
            out.append(Problem(ports_at, f"the attacker's server is also its nameserver: add {_DNS_PORT}."))
        if h.urls_public and (h.uploads or h.attacker):
            out.append(Problem(json_pointer(("hosts", i, "urls_public")), "only a download-only host needs it (the attacker reads everything an upload host gets): remove it."))
    attackers = [i for i, h in enumerate(raw.hosts) if h.attacker]
    if len(attackers) != 1:
        out.append(Problem("/hosts", f'exactly one host must be "attacker": true (found {len(attackers)}).'))
    return out


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    dup = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
    if dup is not None:
        raise ValueError(f'key "{dup}" appears twice in one object; keep one')
    return dict(pairs)


def parse_world(data: Any, source: str = _SOURCE) -> World:
    """Validate already-parsed world data; raise ``WorldError`` listing every problem."""
    try:
        raw = _WorldFile.model_validate(data)
    except ValidationError as exc:
        raise WorldError(source, [_problem_from(e) for e in exc.errors(include_url=False)]) from None  # type: ignore[arg-type]
    problems = _path_problems(raw) + _host_problems(raw)
    if problems:
        raise WorldError(source, problems)
    return World(
        user=raw.user.name,
        uid=raw.user.uid,
        home=raw.user.home,
        roots=raw.roots,
        files=tuple(
            WorldFile(f.path, f.role, f.label, f.content, int(f.mode, 8), f.runs_later, f.story) for f in raw.files
        ),
        dirs=tuple(WorldDir(d.path, d.role, d.label, d.story, d.runs_later) for d in raw.dirs),
        outputs=tuple(WorldDir(o.path, o.role, o.label, o.story) for o in raw.outputs),
        hosts=tuple(Host(h.name, h.uploads, h.how, h.attacker, h.source, h.urls_public, tuple(sorted(h.ports))) for h in raw.hosts),
    )


def read_world(text: str, source: str = _SOURCE) -> World:
    """Parse a world file's text; bad JSON is a ``WorldError`` too."""
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicates)
    except json.JSONDecodeError as exc:
        raise WorldError(source, [Problem("/", f"{json_problem(exc)}.")]) from None
    except ValueError as exc:
        raise WorldError(source, [Problem("/", f"{exc}.")]) from None
    return parse_world(data, source)


@lru_cache(maxsize=1)
def load_world() -> World:
    """The world of this version of Sandbox Lab (read once; it is immutable)."""
    return read_world(resources.files("grader").joinpath("world.json").read_text("utf-8"))
