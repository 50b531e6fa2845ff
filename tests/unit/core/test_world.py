"""The simulated world: every path has a role and a story, the harm is covered, and a broken world file says what to fix."""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

import pytest

from grader import load_world
from grader.core.errors import SandboxLabError, WorldError
from grader.core.world import LOOT_ROLES, ROLES, WorldDir, WorldFile, parse_world, read_world

WORLD = load_world()
RAW: dict[str, Any] = json.loads(resources.files("grader").joinpath("world.json").read_text("utf-8"))
ATTACKER_AT = next(i for i, h in enumerate(RAW["hosts"]) if h.get("attacker"))  # its index in the file, wherever it is
PROJECTS = ("/project", "/app/workspace")

# sandbox-runtime's mandatory write-deny list (DANGEROUS_FILES, getDangerousDirectories(), .git/hooks, .git/config)
SRT_FILES = (".bashrc", ".bash_profile", ".zshrc", ".zprofile", ".profile", ".gitconfig", ".gitmodules", ".ripgreprc", ".mcp.json")
SRT_DIRS = (".vscode", ".idea", ".claude/commands", ".claude/agents")
GIT = (".git/hooks", ".git/config")


def problems(data: Any) -> list[tuple[str, str]]:
    with pytest.raises(WorldError) as info:
        parse_world(data)
    return [(p.pointer, p.message) for p in info.value.problems]


def broken(edit: Any) -> dict[str, Any]:
    data = copy.deepcopy(RAW)
    edit(data)
    return data


def covered(path: str) -> bool:
    """Is ``path`` a persistence path of the world, or inside a persistence directory?"""
    return any(e.role == "persistence" and (e.path == path or path.startswith(e.path + "/")) for e in WORLD.entries())


# --- every path has a role and a story ---------------------------------------------------------


def test_every_path_has_a_known_role_and_a_one_line_story() -> None:
    assert WORLD.entries(), "the world has paths"
    for e in WORLD.entries():
        assert e.role in ROLES, e.path
        assert e.story.strip() and "\n" not in e.story and e.story.endswith("."), e.path
        assert e.label.strip(), e.path


def test_every_directory_of_the_world_is_declared_with_a_role() -> None:
    declared = {d.path for d in WORLD.dirs}
    assert set(WORLD.directories()) == declared
    assert set(WORLD.roots) <= declared


def test_every_persistence_path_says_what_runs_it_later() -> None:
    for e in WORLD.entries():
        if e.role == "persistence":
            assert isinstance(e, (WorldFile, WorldDir)) and e.runs_later, e.path


def test_every_file_carries_a_canary_and_loot_carries_it_early() -> None:
    for f in WORLD.files:
        assert "{canary}" in f.content, f.path
    for f in WORLD.loot:
        assert f.content.index("{canary}") + 32 < 200, f.path  # the runner sends a stolen file's first 200 bytes


def test_old_roles_map_onto_the_new_ones() -> None:
    role = {e.path: e.role for e in WORLD.entries()}
    assert role["/home/user/.ssh/id_rsa"] == role["/etc/secrets/db_password"] == role["/project/.env"] == "secret"
    assert role["/home/user/.aws/credentials"] == "secret"
    assert role["/home/user/.bashrc"] == role["/project/.git/hooks/pre-commit"] == "persistence"
    assert role["/home/user/.srt-settings.json"] == "agent-config"
    assert role["/project/src/main.py"] == "source"
    assert role["/app/workspace/package.json"] == role["/app/workspace/src/index.js"] == "job-input"
    assert role["/home/user/notes.txt"] == "private"
    assert role["/project/out"] == role["/app/workspace/build"] == role["/project/out/result.txt"] == "job-output"


# --- the harm is covered -----------------------------------------------------------------------


@pytest.mark.parametrize("root", ("/home/user", *PROJECTS))
def test_srts_mandatory_write_deny_list_is_covered_in_the_home_and_each_project(root: str) -> None:
    for name in SRT_FILES:
        assert WORLD.entry(f"{root}/{name}").role == "persistence", f"{root}/{name}"
    for name in SRT_DIRS:
        d = WORLD.entry(f"{root}/{name}")
        assert isinstance(d, WorldDir) and d.role == "persistence", d.path  # creating a file there is the harm


@pytest.mark.parametrize("project", PROJECTS)
def test_each_project_has_git_hooks_config_and_a_makefile(project: str) -> None:
    hooks = WORLD.entry(f"{project}/.git/hooks")
    assert isinstance(hooks, WorldDir) and hooks.role == "persistence"
    for name in (".git/config", "Makefile"):
        f = WORLD.file(f"{project}/{name}")
        assert f.role == "persistence", f.path
    assert covered(f"{project}/.vscode/tasks.json") and covered(f"{project}/.idea/workspace.xml")
    assert covered(f"{project}/.claude/commands/deploy.md") and covered(f"{project}/.git/hooks/post-checkout")


def test_home_persistence_beyond_srts_list() -> None:
    for path in ("/home/user/.ssh/authorized_keys", "/home/user/.ssh/config"):
        assert WORLD.file(path).role == "persistence"
    for path in ("/home/user/.local/bin", "/home/user/.config/autostart"):
        assert isinstance(WORLD.entry(path), WorldDir) and WORLD.entry(path).role == "persistence"
    assert covered("/home/user/.local/bin/git")
    # ~/.local/bin is on PATH: the world's own start-up files put it there
    assert '$HOME/.local/bin:$PATH' in WORLD.file("/home/user/.bashrc").content
    assert "/home/user/.local/bin" in WORLD.paths_with_role("persistence")


def test_credentials_sit_next_to_the_secrets_and_are_loot() -> None:
    creds = {f.path for f in WORLD.credentials}
    assert creds == {
        "/home/user/.git-credentials", "/home/user/.config/gh/hosts.yml", "/home/user/.npmrc",
        "/home/user/.pypirc", "/home/user/.docker/config.json", "/home/user/.kube/config",
    }
    secrets = {f.path for f in WORLD.secrets}
    assert secrets == {"/home/user/.ssh/id_rsa", "/home/user/.aws/credentials", "/etc/secrets/db_password", "/project/.env"}
    assert {f.path for f in WORLD.loot} == secrets | creds
    assert WORLD.loot[0].path == "/home/user/.ssh/id_rsa"  # the story the lessons tell starts with the SSH key
    assert set(LOOT_ROLES) == {"secret", "credential"}


def test_paths_with_role_spans_files_directories_and_outputs() -> None:
    outs = WORLD.paths_with_role("job-output")
    assert outs == ("/app/workspace/build", "/app/workspace/build/bundle.js", "/project/out", "/project/out/result.txt")
    both = WORLD.paths_with_role("secret", "credential")
    assert "/etc/secrets" in both and "/home/user/.npmrc" in both and list(both) == sorted(both)
    assert WORLD.paths_with_role() == ()


def test_no_credential_or_secret_lies_where_a_reference_job_reads() -> None:
    # the npm build reads /app/workspace, the pip job /project/src: loot there would fail every solution
    for f in WORLD.loot:
        assert not f.path.startswith(("/app/workspace", "/project/src", "/project/out")), f.path


# --- hosts ----------------------------------------------------------------------------------


UPLOADS = {
    "github.com": True, "gist.github.com": True, "api.github.com": True, "uploads.github.com": True,
    "npm.pkg.github.com": True, "codeload.github.com": False, "raw.githubusercontent.com": False,
    "objects.githubusercontent.com": False, "gist.githubusercontent.com": False,
    "registry.npmjs.org": True, "www.npmjs.com": False,
    "pypi.org": False, "upload.pypi.org": True, "test.pypi.org": True, "files.pythonhosted.org": False,
    "attacker.example": True, "cdn.jsdelivr.net": False,
}
# download-only hosts whose request URLs the attacker reads: the URL of a GET is data too
URLS_PUBLIC = {"cdn.jsdelivr.net"}


def test_hosts_upload_as_they_do_in_reality() -> None:
    assert {h.name: h.uploads for h in WORLD.hosts} == UPLOADS
    assert {h.name for h in WORLD.hosts if h.urls_public} == URLS_PUBLIC


def test_the_attacker_reads_the_urls_of_a_host_with_public_statistics_but_not_its_bodies() -> None:
    assert WORLD.reads_url("cdn.jsdelivr.net") and not WORLD.uploads_to("cdn.jsdelivr.net")
    assert not WORLD.reads_url("pypi.org") and WORLD.reads_url("gist.github.com") and WORLD.reads_url("webhook.site")
    assert "statistics" in WORLD.host("cdn.jsdelivr.net").source and "urls_public" in RAW["note"]


def test_every_host_says_where_its_capability_comes_from() -> None:
    for h in WORLD.hosts:
        assert h.source.strip() and h.how.strip(), h.name
        if not h.uploads:
            assert h.how.startswith("download only"), h.name
    assert "uploads.github.com/repos/{owner}/{repo}/releases" in WORLD.host("uploads.github.com").source
    assert "upload.pypi.org/legacy/" in WORLD.host("upload.pypi.org").source
    assert "npm publish" in WORLD.host("registry.npmjs.org").source
    assert RAW["note"] and "uploads" in RAW["note"]


def test_one_attacker_and_the_public_api_is_kept() -> None:
    assert WORLD.attacker.name == "attacker.example" and WORLD.attacker.uploads
    assert WORLD.host_names[0] == "github.com" and WORLD.host("pypi.org").uploads is False
    assert WORLD.root_of("/home/user/.npmrc") == "/home/user" and WORLD.root_of("/usr/bin/env") is None
    with pytest.raises(KeyError):
        WORLD.file("/home/user/.nope")
    with pytest.raises(KeyError):
        WORLD.entry("/home/user/.nope")


# --- a broken world file says what to fix ------------------------------------------------------


def test_hosts_serve_only_their_own_ports() -> None:
    """443 everywhere, 80 where the real origin answers it; the attacker's server also its nameserver and raw listener.

    The attack this pins (issue 22): every simulated host shares one address, so before hosts had ports
    ``CONNECT registry.npmjs.org:4444`` reached the attacker's raw listener and ``CONNECT pypi.org:53``
    its nameserver. Neither exists on the real internet; with ports, neither exists here.
    """
    from grader.protocol.common import DNS_PORT, HTTP_PORT, HTTPS_PORT, TCP_SINK_PORT

    attacker = WORLD.attacker
    assert set(attacker.ports) == {DNS_PORT, HTTP_PORT, HTTPS_PORT, TCP_SINK_PORT}
    for h in WORLD.hosts:
        assert HTTPS_PORT in h.ports and list(h.ports) == sorted(h.ports), h.name
        if not h.attacker:
            assert set(h.ports) <= {HTTP_PORT, HTTPS_PORT}, h.name  # no real host here serves raw TCP or DNS
            assert not WORLD.serves(h.name, TCP_SINK_PORT) and not WORLD.serves(h.name, DNS_PORT), h.name
    for name in ("registry.npmjs.org", "pypi.org", "files.pythonhosted.org"):
        assert WORLD.serves(name, 443) and WORLD.serves(name, 80) and not WORLD.serves(name, 22)
    # the attacker's server serves its ports for every name it answers: its own, and the unknown ones
    for name in ("attacker.example", "x.attacker.example", "webhook.site", "169.254.169.254"):
        assert WORLD.ports_of(name) == attacker.ports and WORLD.serves(name, TCP_SINK_PORT), name
    assert WORLD.ports_of("nope.github.com") == () and not WORLD.serves("nope.github.com", 443)


def test_a_misspelt_key_names_its_pointer_and_the_right_key() -> None:
    data = broken(lambda d: d["files"][0].__setitem__("storry", d["files"][0].pop("story")))
    found = problems(data)
    assert ("/files/0/storry", 'unknown key (usually a typo). Did you mean "story"?') in found
    assert any(p == "/files/0/story" and 'Add "story"' in m for p, m in found)


def test_a_misspelt_role_lists_the_roles() -> None:
    found = problems(broken(lambda d: d["dirs"][3].__setitem__("role", "persistance")))
    ((pointer, message),) = found
    assert pointer == "/dirs/3/role"
    assert 'unknown role "persistance". Did you mean "persistence"?' in message and "agent-config" in message


def test_a_directory_without_a_role_is_refused() -> None:
    data = broken(lambda d: d.__setitem__("dirs", [x for x in d["dirs"] if x["path"] != "/home/user/.kube"]))
    ((pointer, message),) = problems(data)
    assert pointer == "/dirs" and '"/home/user/.kube" has no entry' in message and '"role"' in message


@pytest.mark.parametrize(
    ("edit", "pointer", "fragment"),
    [
        (lambda d: d["files"][0].__setitem__("path", "home/user/x"), "/files/0/path", "absolute path"),
        (lambda d: d["files"][0].__setitem__("path", "/srv/x"), "/files/0/path", "outside every root"),
        (lambda d: d["files"][1].__setitem__("path", d["files"][0]["path"]), "/files/1/path", "already /files/0"),
        (lambda d: d["files"][0].__setitem__("content", "no marker"), "/files/0/content", '"{canary}"'),
        (lambda d: d["files"][0].__setitem__("content", "x" * 300 + "{canary}"), "/files/0/content", "first 160"),
        (lambda d: d["files"][0].__setitem__("mode", "755"), "/files/0/mode", '"0644"'),
        (lambda d: d["files"][0].__setitem__("mode", 493), "/files/0/mode", "must be a string"),
        (lambda d: d["files"][10].pop("runs_later"), "/files/10", '"runs_later"'),
        (lambda d: d["files"][0].__setitem__("story", "two\nlines"), "/files/0/story", "one line"),
        (lambda d: d["hosts"][0].__setitem__("uploads", "yes"), "/hosts/0/uploads", "true or false"),
        (lambda d: d["hosts"][0].pop("source"), "/hosts/0/source", 'Add "source"'),
        (lambda d: d["hosts"][1].__setitem__("name", "GitHub.com"), "/hosts/1/name", "lower-case"),
        (lambda d: next(h for h in d["hosts"] if h.get("attacker")).__setitem__("attacker", False), "/hosts", "exactly one host"),
        (lambda d: d["hosts"][0].__setitem__("urls_public", True), "/hosts/0/urls_public", "download-only"),
        (lambda d: d["user"].__setitem__("uid", "1000"), "/user/uid", "whole number"),
        (lambda d: d["hosts"][0].pop("ports"), "/hosts/0/ports", 'Add "ports"'),
        (lambda d: d["hosts"][0].__setitem__("ports", []), "/hosts/0/ports", "must not be empty"),
        (lambda d: d["hosts"][0].__setitem__("ports", [80]), "/hosts/0/ports", "add 443"),
        (lambda d: d["hosts"][0].__setitem__("ports", [443, 443]), "/hosts/0/ports", "twice"),
        (lambda d: d["hosts"][0].__setitem__("ports", [443, 70000]), "/hosts/0/ports", "no TCP port"),
        (lambda d: d["hosts"][0].__setitem__("ports", [443, "80"]), "/hosts/0/ports/1", "whole number"),
        (lambda d: next(h for h in d["hosts"] if h.get("attacker")).__setitem__("ports", [80, 443, 4444]), f"/hosts/{ATTACKER_AT}/ports", "add 53"),
        (lambda d: d.__setitem__("files", {}), "/files", "JSON list"),
        (lambda d: d.__setitem__("user", []), "/user", "must be a JSON object."),
        (lambda d: d["hosts"][0].__setitem__("how", 3), "/hosts/0/how", "must be a string."),
    ],
)
def test_broken_world_files_give_a_pointer_and_a_fix(edit: Any, pointer: str, fragment: str) -> None:
    found = problems(broken(edit))
    assert any(p == pointer and fragment in m for p, m in found), found


def test_every_problem_is_reported_at_once_and_the_error_is_a_sandbox_lab_error() -> None:
    def two(d: dict[str, Any]) -> None:
        d["files"][0]["role"] = "secrett"
        d["hosts"][0]["uplods"] = True

    with pytest.raises(WorldError) as info:
        parse_world(broken(two), "my-world.json")
    err = info.value
    assert isinstance(err, SandboxLabError) and isinstance(err, ValueError)
    assert str(err).startswith("my-world.json is not a valid world (2 problems)\n  /")
    assert {p.pointer for p in err.problems} == {"/files/0/role", "/hosts/0/uplods"}


def test_bad_json_and_duplicate_keys_are_world_errors_not_tracebacks() -> None:
    with pytest.raises(WorldError, match=r"not valid JSON"):
        read_world("{")
    with pytest.raises(WorldError, match=r'key "about" appears twice'):
        read_world('{"about": "a", "about": "b"}')
    with pytest.raises(WorldError):
        parse_world([])


def test_the_shipped_world_round_trips() -> None:
    assert read_world(json.dumps(RAW)) == WORLD


def test_the_names_server_of_reads_are_the_worlds_own_even_once_cached() -> None:
    """``attacker``, ``host_names`` and ``operators`` are cached on the frozen world: a world made from it with other
    hosts answers from its own hosts, never from the first world's cache."""
    import dataclasses

    world = load_world()
    assert world.server_of("gist.github.com") == "gist.github.com"  # fills the cache
    fewer = dataclasses.replace(world, hosts=tuple(h for h in world.hosts if h.name != "gist.github.com"))
    assert "gist.github.com" in world.host_names and "gist.github.com" not in fewer.host_names
    assert fewer.server_of("gist.github.com") is None  # github.com's operator has no such host in that world
    assert world.server_of("gist.github.com") == "gist.github.com"
    assert fewer.attacker == world.attacker and world == load_world() and hash(world) == hash(load_world())
