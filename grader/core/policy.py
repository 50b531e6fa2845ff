"""The learner's sandbox policy: its pydantic model, its JSON loader and its normal form.

A policy is the JSON shape of sandbox-runtime's settings file::

    {"filesystem": {"allowRead": [], "denyRead": [], "allowWrite": [], "denyWrite": []},
     "network": {"allowedDomains": [], "deniedDomains": []}}

Every list may be omitted (omitted = empty). Loading checks everything at once
and reports each problem with its JSON pointer and a fix. Limits are enforced
before parsing work can grow with the input (see ``LIMITS``).

This module must not import the world, the analyzer or any backend.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
from pathlib import Path
from typing import Annotated, Any, Iterator, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from grader.core.capped import NotRegular, TooLarge, read_regular
from grader.protocol.domains import never_matches, normalize_pattern
from grader.core.errors import PolicyError, Problem, json_pointer
from grader.core.jsonfile import json_cause
from grader.core.paths import MAX_PATH_LENGTH, covers, normalize_path, uses_dotdot
from grader.core.text import text_problems

__all__ = [
    "LIMITS",
    "SCHEMA_VERSION",
    "FilesystemPolicy",
    "NetworkPolicy",
    "Policy",
    "SRT_REQUIRED",
    "load_policy",
    "parse_policy",
    "policy_schema",
    "srt_missing",
]

SCHEMA_VERSION = 1

LIMITS = {
    "file_bytes": 1_000_000,  # a policy is a few hundred bytes; 1 MB is generous and cheap to refuse
    "list_entries": 1_000,
    # network.allowedDomains: a real run asks one allowed name of each kind (scope.stand_ins: names nothing a run sees
    # tells apart), so a list of hosts costs what its kinds cost, not its length. Measured (bench/allowed_domains.py,
    # Docker, 2 cores under load): a Claude Code-style list of 60 registries and APIs runs 1.3-1.5x as long as its
    # first 10 entries (about 2.5 s); the worst case, 100 entries each made its own kind by a deniedDomains entry,
    # about 10 s, judged every time, well inside the sandbox's 60 s. Asking every name at once had capped the list at
    # 10 (past 14 the simulated internet lost connections and the evidence stayed incomplete however often it was
    # rerun). The same cap on every backend, so no policy is graded by one backend and not another.
    "allowed_domains": 100,
    "path_chars": MAX_PATH_LENGTH,
    "host_chars": 253,
    "nesting_depth": 16,  # a policy is three levels deep; anything deeper is not a policy
}

PathEntry = Annotated[str, AfterValidator(normalize_path)]
DomainEntry = Annotated[str, AfterValidator(normalize_pattern)]
DeniedEntry = Annotated[str, AfterValidator(functools.partial(normalize_pattern, denied=True))]

# sandbox-runtime settings we recognise but do not model: naming them beats "unknown key"
_SRT_ONLY_KEYS = {
    "allowUnixSockets", "allowAllUnixSockets", "allowLocalBinding", "httpProxyPort",
    "socksProxyPort", "ignoreViolations", "enableWeakerNestedSandbox", "mandatoryDenySearchDepth",
    "allowGitConfig", "allowPty", "ripgrep",
}


def _dedupe(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


class _Strict(BaseModel):
    # extra="forbid": in a security policy an unknown key is usually a typo that
    # silently widens the sandbox (sandbox-runtime drops such keys; we refuse them).
    model_config = ConfigDict(extra="forbid", frozen=True)


class FilesystemPolicy(_Strict):
    """What the sandboxed process may read and write."""

    allowRead: tuple[PathEntry, ...] = Field(
        default=(),
        description=("Paths re-opened for reading inside a denyRead (they win there, on the same path too). Reads are "
                     "allowed by default, so an allowRead no denyRead surrounds restricts nothing."),
    )
    denyRead: tuple[PathEntry, ...] = Field(
        default=(), description="Paths hidden from the sandbox: everything else is readable (a denied directory shows empty)."
    )
    allowWrite: tuple[PathEntry, ...] = Field(
        default=(), description=("Paths writable; nothing else is. One inside a denyRead is bound back readable and writable; "
                                 "sandbox-runtime's mandatory write protections hold whatever it says.")
    )
    denyWrite: tuple[PathEntry, ...] = Field(
        default=(), description="Paths kept read-only: denyWrite wins over allowWrite, whichever is more specific."
    )

    def normalized(self) -> dict[str, list[str]]:
        return {k: list(_dedupe(getattr(self, k))) for k in ("allowRead", "denyRead", "allowWrite", "denyWrite")}


class NetworkPolicy(_Strict):
    """Which hosts the sandbox may reach through the egress proxy."""

    allowedDomains: tuple[DomainEntry, ...] = Field(
        default=(),
        description=('Hosts reachable: exact names, IPv4 literals or "*.suffix" (strict '
                     'subdomains), each optionally with ":port" (that port only). Empty = no network. '
                     'At most 100 entries.'),
        json_schema_extra={"maxItems": LIMITS["allowed_domains"]},  # for editors; loading says it with a fix
    )
    deniedDomains: tuple[DeniedEntry, ...] = Field(
        default=(), description=('Hosts never reachable, even when an allowedDomains entry matches (deny wins); '
                                 'the same forms, and "*" (or "*:port") for every host.'),
    )

    def normalized(self) -> dict[str, list[str]]:
        return {k: list(_dedupe(getattr(self, k))) for k in ("allowedDomains", "deniedDomains")}


class Policy(_Strict):
    """A sandbox policy: the filesystem axis and the network axis, scoped independently."""

    schema_: Union[str, None] = Field(default=None, alias="$schema", description="Optional JSON Schema URL for editors.")
    filesystem: FilesystemPolicy = Field(default_factory=FilesystemPolicy)
    network: NetworkPolicy = Field(default_factory=NetworkPolicy)

    _warnings: tuple[Problem, ...] = PrivateAttr(default=())

    @property
    def warnings(self) -> tuple[Problem, ...]:
        """Things that are valid but probably not what the author meant (e.g. ``..`` in a path)."""
        return self._warnings

    def normalize(self) -> dict[str, Any]:
        """The canonical JSON form: every list present, entries normalized, duplicates dropped."""
        return {"filesystem": self.filesystem.normalized(), "network": self.network.normalized()}

    def canonical_json(self) -> str:
        """One string per meaning: equal for policies that mean the same, used to grade duplicates once."""
        return json.dumps(self.normalize(), sort_keys=True, separators=(",", ":"))

    @property
    def allowed_domains_written(self) -> bool:
        """True if the author wrote ``network.allowedDomains`` explicitly (even as ``[]``)."""
        return "network" in self.model_fields_set and "allowedDomains" in self.network.model_fields_set


def policy_schema() -> dict[str, Any]:
    """The JSON Schema of a policy, for editors and for the lessons."""
    schema = Policy.model_json_schema(by_alias=True)
    schema["$id"] = f"https://sandbox-lab.invalid/policy/v{SCHEMA_VERSION}.json"
    schema["title"] = "Sandbox Lab policy"
    return schema


# --- loading -------------------------------------------------------------------------------


class _Dup(dict[str, Any]):
    """A JSON object that remembers which keys it saw twice."""

    dups: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> _Dup:
    obj = _Dup()
    seen: list[str] = []
    for k, v in pairs:
        if k in obj:
            seen.append(k)
        obj[k] = v
    obj.dups = tuple(seen)
    return obj


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _nesting_depth(text: str) -> int:
    """Deepest bracket nesting outside strings; linear, so a hostile file cannot blow the stack."""
    depth = best = 0
    in_str = esc = False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            best = max(best, depth)
        elif c in "]}":
            depth -= 1
    return best


def _walk(value: Any, loc: tuple[Union[str, int], ...] = ()) -> Iterator[tuple[tuple[Union[str, int], ...], Any]]:
    yield loc, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, loc + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, loc + (i,))


def _structural_problems(data: Any) -> list[Problem]:
    problems = []
    for loc, value in _walk(data):
        if isinstance(value, _Dup) and value.dups:
            for key in dict.fromkeys(value.dups):
                problems.append(Problem(
                    json_pointer(loc + (key,)),
                    "this key appears more than once. JSON parsers disagree on which one wins, "
                    "and a policy must mean one thing: keep one.",
                ))
        if loc == ("network", "allowedDomains") and isinstance(value, list) and len(value) > LIMITS["allowed_domains"]:
            problems.append(Problem(
                json_pointer(loc),
                f"{len(value)} entries; Sandbox Lab runs at most {LIMITS['allowed_domains']} allowed domains. A run "
                "asks one host of each kind of entry, and deniedDomains or ports can make every entry its own kind; "
                "the limit keeps such a run well inside the sandbox's minute. List only the hosts the job talks to "
                "(a Claude Code setup needs a few dozen).",
            ))
        elif isinstance(value, list) and len(value) > LIMITS["list_entries"]:
            problems.append(Problem(
                json_pointer(loc),
                f"{len(value)} entries; the limit is {LIMITS['list_entries']}. Name directories, not every file.",
            ))
    return problems


def _decode(raw: bytes, source: str) -> str:
    if len(raw) > LIMITS["file_bytes"]:
        raise PolicyError(source, [Problem("/", f"the file is larger than {LIMITS['file_bytes']:,} bytes; a policy is a few hundred.")])
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a UTF-8 byte-order mark, as some editors write: harmless, dropped
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(source, [Problem("/", f"byte {exc.start} is not UTF-8. Save the file as UTF-8.")]) from None
    if not text.strip():
        raise PolicyError(source, [Problem("/", 'the file is empty. A policy is a JSON object; the smallest is "{}".')])
    return text


def _parse_json(text: str, source: str) -> Any:
    if _nesting_depth(text) > LIMITS["nesting_depth"]:
        raise PolicyError(source, [Problem("/", f"nested deeper than {LIMITS['nesting_depth']} levels; a policy is three levels deep.")])
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_refuse_constant)
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            msg = f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}."
            cause = json_cause(exc)
            if cause:
                msg += f" {cause[0].upper()}{cause[1:]}."
        else:
            msg = f"invalid JSON: {exc} (NaN and Infinity are not allowed)."
        raise PolicyError(source, [Problem("/", msg)]) from None


def _suggest(key: str, known: list[str]) -> str:
    if key in _SRT_ONLY_KEYS:
        return "a sandbox-runtime setting that Sandbox Lab does not model. Remove it."
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if not close:
        close = [k for k in known if k.lower() == key.lower()]
    hint = f' Did you mean "{close[0]}"?' if close else f" Known keys here: {', '.join(known)}."
    return "unknown key (an unknown key is usually a typo that leaves a rule out)." + hint


_KNOWN = {
    (): ["filesystem", "network", "$schema"],
    ("filesystem",): list(FilesystemPolicy.model_fields),
    ("network",): list(NetworkPolicy.model_fields),
}

_EXAMPLES = {
    "filesystem": '{"allowWrite": ["/project/out"]}',
    "network": '{"allowedDomains": ["registry.npmjs.org"]}',
}


def _problem_from(err: dict[str, Any]) -> Problem:
    loc = tuple(err["loc"])
    kind = err["type"]
    ptr = json_pointer(loc)
    if kind == "extra_forbidden":
        return Problem(ptr, _suggest(str(loc[-1]), _KNOWN.get(loc[:-1], [])))
    if kind == "value_error":
        msg = str(err["msg"]).removeprefix("Value error, ")
        return Problem(ptr, msg)
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        if not loc:
            return Problem(ptr, 'a policy is a JSON object, e.g. {"filesystem": {...}, "network": {...}}.')
        example = _EXAMPLES.get(str(loc[-1]), "{...}")
        return Problem(ptr, f"must be a JSON object, e.g. {example}.")
    if kind in ("tuple_type", "list_type"):
        example = '["registry.npmjs.org"]' if "network" in loc else '["/project/out"]'
        return Problem(ptr, f"must be a list of strings, e.g. {example}. Use [] for none.")
    if kind == "string_type":
        return Problem(ptr, "must be a string.")
    return Problem(ptr, str(err["msg"]))


def _dotdot_warnings(data: Any) -> list[Problem]:
    out = []
    fs = data.get("filesystem") if isinstance(data, dict) else None
    if isinstance(fs, dict):
        for key, entries in fs.items():
            if isinstance(entries, list):
                for i, e in enumerate(entries):
                    if isinstance(e, str) and uses_dotdot(e):
                        out.append(Problem(
                            json_pointer(("filesystem", key, i)),
                            f'uses "..": it means {normalize_path(e)!r}. Write that instead, so readers see it too.',
                        ))
    return out


def _network_warnings(policy: Policy) -> list[Problem]:
    """Domain entries srt takes that can match no host (a look-alike deny entry blocks nothing): say so."""
    out = []
    for key in ("allowedDomains", "deniedDomains"):
        for i, entry in enumerate(getattr(policy.network, key)):
            why = never_matches(entry)
            if why:
                out.append(Problem(json_pointer(("network", key, i)), why))
    return out


# The programs every command needs: srt hides them like any other path (a denyRead of "/" is expanded into the
# root's children, /proc, /dev and /sys aside), and then nothing starts, the job included. The simulated machine
# has no such directories, so the lab cannot show that run: it refuses the rule with the reason (fail closed).
RUNTIME_DIRS = ("/usr", "/bin", "/lib", "/sbin")


def _hidden_runtime(policy: Policy) -> list[Problem]:
    """denyRead entries that hide the programs every command runs (no allowRead re-opens them)."""
    fs = policy.filesystem
    out = []
    for i, d in enumerate(fs.denyRead):
        hidden = [r for r in RUNTIME_DIRS if covers(d, r) and not any(covers(d, a) and covers(a, r) for a in fs.allowRead)]
        if hidden:
            out.append(Problem(json_pointer(("filesystem", "denyRead", i)), (
                f'"{d}" also hides {", ".join(hidden)}, the programs every command runs: sandbox-runtime takes the rule, '
                "and then no command starts in the sandbox, the job's included. Sandbox Lab's simulated machine has none "
                "of those directories, so it cannot show that run. Hide the places that hold data instead (the home \"~\", "
                '"/etc/secrets", the projects), and re-open inside them with allowRead what the job reads.')))
    return out


# What sandbox-runtime's settings schema requires (its sandbox-config.js: allowRead alone is optional); srt refuses
# a file without them. The lab reads a missing list as empty, as Claude Code's optional keys are; check says so.
SRT_REQUIRED = (("filesystem", "denyRead"), ("filesystem", "allowWrite"), ("filesystem", "denyWrite"),
                ("network", "allowedDomains"), ("network", "deniedDomains"))


def srt_missing(policy: Policy) -> tuple[str, ...]:
    """The keys srt's schema requires that the policy file does not write (``"filesystem.denyWrite"``, ...)."""
    out = []
    for section, key in SRT_REQUIRED:
        written = section in policy.model_fields_set and key in getattr(policy, section).model_fields_set
        if not written:
            out.append(f"{section}.{key}")
    return tuple(out)


def parse_policy(data: Any, source: str = "policy") -> Policy:
    """Validate already-parsed JSON data; raise ``PolicyError`` listing every problem."""
    problems = _structural_problems(data)
    bad_text = text_problems(data)
    if bad_text:  # checked before the model: pydantic's own words for such a string name neither the place nor the fix
        raise PolicyError(source, bad_text + problems)
    try:
        policy = Policy.model_validate(data, by_alias=True)
    except ValidationError as exc:
        problems.extend(_problem_from(e) for e in exc.errors(include_url=False))  # type: ignore[arg-type]
        policy = None
    except (RecursionError, TypeError) as exc:  # defensive: never a traceback for a learner
        problems.append(Problem("/", f"cannot be read as a policy ({type(exc).__name__})."))
        policy = None
    if policy is not None:
        problems.extend(_hidden_runtime(policy))
    if problems or policy is None:
        raise PolicyError(source, problems)
    policy._warnings = tuple(_dotdot_warnings(data) + _network_warnings(policy))
    return policy


def load_policy(source: Union[str, os.PathLike[str], bytes, dict[str, Any]], *, name: Union[str, None] = None) -> Policy:
    """Load a policy from a file path, JSON text/bytes, or a dict; raise ``PolicyError`` on any problem.

    A missing file and an invalid policy are different results: the first is a
    ``PolicyError`` saying the file does not exist, never a default policy.
    """
    if isinstance(source, dict):
        return parse_policy(source, name or "policy")
    if isinstance(source, bytes):
        label = name or "policy"
        return parse_policy(_parse_json(_decode(source, label), label), label)
    if isinstance(source, str) and (not source.strip() or source.lstrip().startswith(("{", "[", '"'))):
        label = name or "policy"
        return parse_policy(_parse_json(_decode(source.encode("utf-8", "surrogatepass"), label), label), label)
    path = Path(source)
    label = name or str(path)
    try:
        # a link the learner made is followed; a pipe or a device is refused, never waited on or read without end
        raw = read_regular(path, LIMITS["file_bytes"], follow=True)
    except TooLarge:
        raise PolicyError(label, [Problem("/", f"the file is larger than {LIMITS['file_bytes']:,} bytes; a policy is a few hundred.")]) from None
    except FileNotFoundError:
        raise PolicyError(label, [Problem("/", "no such file. Check the path, or create it with a policy such as {}.")]) from None
    except NotRegular as exc:
        raise PolicyError(label, [Problem("/", f"is {exc.what}, not a policy file. Save the policy in a file and pass its path.")]) from None
    except OSError as exc:
        raise PolicyError(label, [Problem("/", f"cannot be read: {exc.strerror}.")]) from None
    return parse_policy(_parse_json(_decode(raw, label), label), label)
