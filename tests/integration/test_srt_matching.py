"""Sandbox Lab's host matching and domain-entry validation against sandbox-runtime's own code, over generated cases.

One Node.js process (``srt_matching.mjs``) runs srt's real functions — its zod
schema for ``allowedDomains`` and ``deniedDomains`` entries, ``isValidHost``
and ``canonicalizeHost`` for the requested host, ``matchesDomainPatternWithPort``
for the match — on cases drawn with a seeded RNG: Unicode look-alikes
(full-width, Cyrillic and Greek homoglyphs, dotless i, KELVIN SIGN, ß, final
sigma), case, trailing and leading dots, empty labels, ``xn--`` labels good and
bad, wildcards at every depth, ports good and bad, IP literals (dotted, shorthand
such as ``127.1`` and ``2852039166``, hex and octal, bracketed IPv6, IPv4-mapped).
Every case must get the lab's answer (``grader.protocol.domains``), except entries
the lab refuses on purpose, with the reason (an IPv6 address, a control
character, a bracket only a URL parser reads): those are counted and printed.

It needs srt installed (``scripts/ensure-srt``) and Node.js >= 22.12. Locally it
skips with the reason when they are missing; with ``CI`` set it fails instead,
as the other srt tests do.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any, Optional

import pytest

from grader.protocol import domains
from grader.protocol.domains import matches, normalize_pattern, request_host, srt_accepts

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("srt_matching.mjs")
SRT_PACKAGE = Path(os.environ.get("SANDBOX_LAB_SRT_DIR", ROOT / "tools" / "srt")) / "node_modules" / "@anthropic-ai" / "sandbox-runtime"
NODE_MIN = (22, 12)
SEED = 38
MATCH_CASES = 12_000

# The lab's refusals of entries srt takes, each with its stated reason (grader/protocol/domains.py's docstring).
DEVIATIONS = ("names the IPv6 address", "contains a control character", "inside brackets", "DNS carries at most")


def _node() -> tuple[Optional[str], str]:
    """A Node.js new enough for srt (the machine's or the one scripts/ensure-srt links into .venv), or why none is."""
    seen = []
    for node in (shutil.which("node"), str(ROOT / ".venv" / "bin" / "node")):
        if not node or not Path(node).exists():
            continue
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20).stdout.strip()
        seen.append(f"{node} {version}")
        try:
            if tuple(int(x) for x in version.lstrip("v").split(".")[:2]) >= NODE_MIN:
                return node, ""
        except ValueError:
            continue
    return None, f"no Node.js >= {NODE_MIN[0]}.{NODE_MIN[1]} (found: {', '.join(seen) or 'none'})"


def _need(problem: str) -> None:
    msg = f"srt's matcher cannot run here: {problem}; run scripts/ensure-srt"
    if os.environ.get("CI"):
        pytest.fail(f"{msg}; CI is set, so this fails instead of skipping", pytrace=False)
    pytest.skip(msg)


def _srt(cases: dict[str, Any]) -> dict[str, Any]:
    node, problem = _node()
    if node is None:
        _need(problem)
    if not (SRT_PACKAGE / "dist" / "sandbox" / "domain-pattern.js").is_file():
        _need(f"@anthropic-ai/sandbox-runtime is not installed in {SRT_PACKAGE.parents[2]}")
    assert node is not None
    done = subprocess.run([node, str(SCRIPT)], input=json.dumps({"srt": str(SRT_PACKAGE), **cases}),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    assert out["version"] == "0.0.83", f"the lab models srt 0.0.83; installed: {out['version']}"
    return out


# --- the generator ------------------------------------------------------------------------------

NAMES = ["github.com", "gist.github.com", "api.github.com", "raw.githubusercontent.com", "registry.npmjs.org",
         "pypi.org", "files.pythonhosted.org", "attacker.example", "a.b.c.attacker.example", "localhost",
         "example.com", "bücher.example", "kelvin.example", "straße.example", "ισ.example", "i.example"]
LOOK_ALIKES = {"a": ["а", "ɑ"], "e": ["е"], "o": ["о", "ο", "０"], "i": ["і", "ι", "ı", "İ"], "c": ["с"], "p": ["р"],
               "k": ["K", "κ"], "s": ["ѕ", "ß", "ς", "Σ"], "g": ["ɡ"], "h": ["һ"], ".": ["．", "。", "｡"]}
PORTS = [None, 22, 53, 80, 443, 4444, 8443, 65535]
BAD_PORTS = ["0", "65536", "0443", "abc", "", "99999999", "443.allowed.com", "80:443", " 443", "+443", "4_43"]
IPV4 = ["1.2.3.4", "127.0.0.1", "169.254.169.254", "10.0.0.1", "0.0.0.0", "255.255.255.255", "256.1.1.1",
        "127.1", "127.0.1", "2852039166", "2130706433", "0x7f.0.0.1", "0x7F000001", "0177.0.0.1", "010.0.0.1",
        "1.2.3.4.5", "1.2.3", "1.2.3.", "1.2.3.4.", "0x", "4294967296", "1.256", "09.1.1.1"]
IPV6 = ["::1", "::", "0:0:0:0:0:0:0:1", "::ffff:1.2.3.4", "::ffff:7f00:1", "::FFFF:169.254.169.254", "2001:DB8::1",
        "2001:db8:0:0:1:0:0:1", "fe80::1%eth0", "64:ff9b::1.2.3.4", "::1.2.3.4", "1::", "1:2:3:4:5:6:7:8",
        "1:2:3:4:5:6:7:8:9", "::g", "::ffff:01.2.3.4", "2001:db8::1%x.allowed.com"]


def _look_alike(rng: random.Random, name: str) -> str:
    out = []
    for c in name:
        r = rng.random()
        if r < 0.12 and c in LOOK_ALIKES:
            out.append(rng.choice(LOOK_ALIKES[c]))
        elif r < 0.2 and c.isascii() and c.isalnum():
            out.append(chr(ord(c) + 0xFEE0))  # the full-width form
        else:
            out.append(c)
    return "".join(out)


def _punycode(rng: random.Random, name: str) -> str:
    """Some labels in xn-- form: right, from another look-alike, or broken."""
    labels = []
    for label in name.split("."):
        r = rng.random()
        if r < 0.3 and not label.isascii():
            try:
                labels.append("xn--" + label.encode("punycode").decode("ascii"))
                continue
            except UnicodeError:
                pass
        if r < 0.4:
            labels.append(rng.choice(["xn--", "xn--zz", "xn--a-", "xn--bcher-kva", "XN--BCHER-KVA", "xn--mnchen-3ya",
                                      "xn--gthub-n2e", "xn--abc", "xn--ls8h", "xn--i-7iq", "xn--0ca", "xn--zca",
                                      "xn--4xa", "xn--3xa", "xn--kss", "xn--n3h", "xn--bcher-kva-"]))
            continue
        labels.append(label)
    return ".".join(labels)


def _spell(rng: random.Random, name: str) -> str:
    """One spelling of a name: its case, a dot too many or too few, a look-alike, an xn-- label."""
    r = rng.random()
    if r < 0.25:
        name = _look_alike(rng, name)
    elif r < 0.4:
        name = _punycode(rng, name)
    r = rng.random()
    if r < 0.3:
        name = "".join(c.upper() if rng.random() < 0.5 else c for c in name)
    r = rng.random()
    if r < 0.1:
        name += "."
    elif r < 0.14:
        name = "." + name
    elif r < 0.18:
        name = name.replace(".", "..", 1)
    elif r < 0.2:
        name = name.replace(".", "_", 1)
    return name


def _host(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.12:
        return rng.choice(IPV4) + rng.choice(["", "", "", "."])
    if r < 0.2:
        v6 = rng.choice(IPV6)
        return f"[{v6}]" if rng.random() < 0.7 else v6
    if r < 0.24:
        return rng.choice(["", ".", "..", "a", "*", "*.github.com", "gist.github.com\x00.evil", "a b.com", "github.com:443",
                           "[github.com]", "-a.com", "a" * 64 + ".com", "x" * 256 + ".com", "ｇｉｓｔ.github.com"])
    name = rng.choice(NAMES)
    for _ in range(rng.choice([0, 0, 1, 2])):
        name = rng.choice(["gist", "a", "x0", "deep", "xn--bcher-kva", "_dmarc", "-", "0x1"]) + "." + name
    return _spell(rng, name)


def _entry(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.08:
        host = rng.choice(IPV4)
    elif r < 0.14:
        host = "[" + rng.choice(IPV6) + "]" if rng.random() < 0.8 else rng.choice(IPV6)
    elif r < 0.2:
        host = rng.choice(["*", "*.", "*.*", "*.com", "*.org.", "a.*.github.com", "github.*", "*github.com",
                           "*.*.github.com", "**.github.com", "*..github.com", "*.github..com", "intranet", "",
                           "https://registry.npmjs.org", "http://gist.github.com/x", "registry.npmjs.org/",
                           "10.0.0.0/8", "github.com/user/repo", "a b.com", " github.com", "git\thub.com",
                           "github\x00.com", "[github.com]", "[GitHub.com.]:443", "[127.1]", "[a.com]junk",
                           "[a.com", "[*.github.com]", "[*]", "[ｇｉｓｔ.github.com]", "[a@b.com]", "localhost",
                           "LOCALHOST", "localhost.", "*.localhost", "*.2.3.4", "*.1.2.3.4", "a" * 64 + ".com"])
    else:
        name = rng.choice(NAMES)
        labels = name.split(".")
        if rng.random() < 0.4 and len(labels) > 1:  # a wildcard at some depth
            cut = rng.randrange(0, len(labels) - 1)
            name = "*." + ".".join(labels[cut:]) if rng.random() < 0.9 else ".".join(labels[:cut] + ["*"] + labels[cut + 1:])
        host = _spell(rng, name)
    r = rng.random()
    if r < 0.25:
        return f"{host}:{rng.choice([p for p in PORTS if p])}"
    if r < 0.32:
        return f"{host}:{rng.choice(BAD_PORTS)}"
    return host


def _related_host(rng: random.Random, entry: str) -> str:
    """A host near an entry, so that a good share of cases match."""
    base = entry.rsplit(":", 1)[0] if entry.count(":") == 1 else entry
    base = base.strip("[]")
    if base.startswith("*."):
        base = rng.choice(["gist", "a.b", "x", "", "xn--bcher-kva"]) + "." + base[2:]
    if rng.random() < 0.3:
        base = _spell(rng, base)
    return base


def _cases() -> tuple[list[str], list[str], list[tuple[str, str, int]]]:
    rng = random.Random(SEED)
    entries = list(dict.fromkeys([_entry(rng) for _ in range(4000)]))
    hosts = list(dict.fromkeys([_host(rng) for _ in range(4000)]))
    cases = []
    while len(cases) < MATCH_CASES:
        entry = rng.choice(entries)
        host = _related_host(rng, entry) if rng.random() < 0.6 else rng.choice(hosts)
        cases.append((entry, host, rng.choice([p for p in PORTS if p])))
    hosts = list(dict.fromkeys(hosts + [h for _, h, _ in cases]))
    return entries, hosts, cases


# --- the lab's side ----------------------------------------------------------------------------


def _lab_entry(entry: str, denied: bool) -> tuple[Optional[str], str]:
    """(normal form or None, the refusal's text)."""
    try:
        return normalize_pattern(entry, denied=denied), ""
    except ValueError as exc:
        return None, str(exc)


def _labelled(why: str) -> bool:
    return any(d in why for d in DEVIATIONS)


def _lab_host(host: str) -> Optional[str]:
    try:
        return request_host(host)
    except ValueError:
        return None


@pytest.fixture(scope="module")
def compared() -> dict[str, Any]:
    entries, hosts, cases = _cases()
    srt = _srt({"entries": entries, "hosts": hosts, "matches": cases})
    return {"entries": entries, "hosts": hosts, "cases": cases, "srt": srt}


def test_the_lab_accepts_exactly_the_domain_entries_srt_accepts(compared: dict[str, Any]) -> None:
    wrong, labelled = [], 0
    for entry, (srt_allowed, srt_denied) in zip(compared["entries"], compared["srt"]["valid"]):
        for denied, srt_ok in ((False, srt_allowed), (True, srt_denied)):
            normal, why = _lab_entry(entry, denied)
            if normal is None and srt_ok and _labelled(why):
                labelled += 1
                continue
            if (normal is not None) != srt_ok:
                wrong.append((entry, "deniedDomains" if denied else "allowedDomains", srt_ok, why))
            if "inside brackets" not in why and srt_accepts(entry, denied=denied) != srt_ok:
                wrong.append((entry, "srt_accepts", srt_ok, "srt_accepts disagrees"))
    n = 2 * len(compared["entries"])
    print(f"\n{n} domain entries checked against srt's schema ({labelled} refused by the lab on purpose)")
    assert not wrong, f"{len(wrong)} of {n} disagree, e.g. {wrong[:10]}"


def test_the_lab_canonicalizes_a_requested_host_exactly_as_srt_does(compared: dict[str, Any]) -> None:
    wrong = [(h, s, _lab_host(h)) for h, s in zip(compared["hosts"], compared["srt"]["hosts"]) if _lab_host(h) != s]
    print(f"\n{len(compared['hosts'])} requested hosts canonicalized as srt does")
    assert not wrong, f"{len(wrong)} of {len(compared['hosts'])} disagree (host, srt, lab), e.g. {wrong[:10]}"


def test_the_lab_matches_every_entry_host_and_port_exactly_as_srt_does(compared: dict[str, Any]) -> None:
    wrong, skipped, hits = [], 0, 0
    for (entry, host, port), srt_match in zip(compared["cases"], compared["srt"]["matches"]):
        hits += srt_match
        normal, why = _lab_entry(entry, denied=True)  # deniedDomains takes every allowedDomains entry, and "*"
        if normal is None and "inside brackets" in why:
            skipped += 1
            continue
        pattern = entry if normal is None else normal  # an entry srt refuses: its raw matcher all the same
        canonical = _lab_host(host)
        lab = canonical is not None and matches(pattern, canonical, port)
        if lab != srt_match:
            wrong.append((entry, host, port, srt_match, lab, pattern, canonical))
        # and as the proxy decides, through a one-entry list on each side
        if normal is not None and domains.filter_request(host, port, [normal], []) != srt_match:
            wrong.append((entry, host, port, srt_match, "filter_request"))
    n = len(compared["cases"])
    print(f"\n{n} (entry, host, port) cases compared with srt's matcher: {hits} match, "
          f"{skipped} not compared (an entry the lab refuses with its reason)")
    assert n >= 10_000
    assert not wrong, f"{len(wrong)} of {n} disagree (entry, host, port, srt, lab, ...), e.g. {wrong[:10]}"


def test_python_lower_case_agrees_with_javascripts_wherever_it_gives_ascii(compared: dict[str, Any]) -> None:
    """An entry is lower-cased at load (str.lower) where srt lower-cases it at match time (toLowerCase): only a
    lower case holding ASCII can ever equal a requested host, and for those the two agree."""
    srt = {c: low for c, low in compared["srt"]["lower"]}
    lab = {c: chr(c).lower() for c in range(0x80, 0x110000) if any(ord(x) < 0x80 for x in chr(c).lower())}
    assert srt == lab
