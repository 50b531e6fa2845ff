"""Static predictions for the seed's setups and the practice task, the channel rules, and the lints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader import PROBES, load_policy, load_world
from grader.core.access import access_for
from grader.core.analyzer import channels, exfil_paths, lint, predict, tunnel
from grader.core.outcomes import RunResult

REPO = Path(__file__).parents[3]
NAIVE = REPO / "examples" / "naive.json"
SECURE = REPO / "examples" / "secure.json"
PRACTICE = REPO / "solutions" / "scope-secure-sandbox.json"
ATTACKS = [p.id for p in PROBES if p.kind == "attack"]
JOBS = [p.id for p in PROBES if p.kind == "job"]
WORLD = load_world()


def outcomes(source: Any) -> dict[str, str]:
    return {p.id: p.outcome for p in predict(load_policy(source)).probes}


def explanation(result: RunResult, probe_id: str) -> str:
    return result.outcome(probe_id).explanation


# --- the seed's two setups and the practice task ----------------------------------------------


def test_naive_setup_leaks_the_ssh_key_through_a_gist() -> None:
    result = predict(load_policy(NAIVE))
    got = {p.id: p.outcome for p in result.probes}
    assert got["read-ssh-key"] == "succeeded"
    # srt starts in the home and keeps ~/.bashrc read-only whatever allowWrite says; its own settings file is not protected
    assert got["write-shell-rc"] == "blocked"
    assert got["write-sandbox-settings"] == "succeeded"
    assert got["exfil-secret"] == "succeeded"
    assert got["exfil-via-allowed-domain"] == "succeeded"
    assert "gist.github.com" in explanation(result, "exfil-secret")
    assert "/home/user/.ssh/id_rsa" in explanation(result, "exfil-secret")
    # a scoped network still never allows raw, DNS or gateway traffic
    for probe_id in ("net-direct-ip", "net-dns-exfil", "net-host-gateway", "net-attacker-domain"):
        assert got[probe_id] == "blocked", probe_id


def test_secure_setup_blocks_persistence_but_npm_publish_is_still_a_way_out() -> None:
    result = predict(load_policy(SECURE))
    got = {p.id: p.outcome for p in result.probes}
    assert got["write-shell-rc"] == "blocked"
    assert got["write-git-hook"] == "blocked"
    assert got["exfil-secret"] == "succeeded"
    assert "registry.npmjs.org" in explanation(result, "exfil-secret")
    assert got["job-write-build"] == "succeeded"
    assert got["job-fetch-npm"] == "succeeded"


def test_practice_solution_blocks_every_attack_and_the_job_still_works() -> None:
    got = outcomes(PRACTICE)
    assert {got[a] for a in ATTACKS} == {"blocked"}
    assert got["job-read-src"] == "succeeded"
    assert got["job-write-out"] == "succeeded"


def test_plain_container_is_not_a_sandbox() -> None:
    result = predict(None)
    got = {p.id: p.outcome for p in result.probes}
    assert result.sandbox == "baseline" and result.policy is None
    assert got["net-direct-ip"] == got["net-dns-exfil"] == got["net-host-gateway"] == "succeeded"
    assert got["read-ssh-key"] == got["exfil-secret"] == got["write-shell-rc"] == "succeeded"
    assert got["read-etc-secrets"] == "blocked"  # /etc/secrets is not mounted into the container


# --- channels -----------------------------------------------------------------------------


def test_download_only_hosts_are_not_channels() -> None:
    policy = load_policy({"network": {"allowedDomains": ["pypi.org", "files.pythonhosted.org"]}})
    assert channels(access_for(policy, load_world())) == ()
    got = outcomes(policy.normalize())
    assert got["job-fetch-pypi"] == "succeeded"
    assert got["exfil-via-allowed-domain"] == "blocked"
    assert got["exfil-secret"] == "blocked"  # secrets are readable, but nothing leads out


def test_upload_channel_exists_whatever_is_readable() -> None:
    # srt: "only /project/src readable" hides the roots with denyRead and re-opens /project/src with allowRead
    got = outcomes({"filesystem": {"denyRead": ["/home/user", "/project", "/app/workspace", "/etc/secrets"], "allowRead": ["/project/src"]},
                    "network": {"allowedDomains": ["upload.pypi.org"]}})
    assert got["exfil-via-allowed-domain"] == "succeeded"
    assert got["exfil-secret"] == "blocked"


def test_wildcard_for_the_attackers_zone_opens_dns_exfiltration() -> None:
    got = outcomes({"network": {"allowedDomains": ["*.attacker.example"]}})
    assert got["net-dns-exfil"] == "succeeded"
    assert got["net-attacker-domain"] == "blocked"  # the apex rule
    assert got["exfil-secret"] == "succeeded"


def test_denied_domains_close_a_channel() -> None:
    every_upload_host = ["gist.github.com", "api.github.com", "uploads.github.com", "npm.pkg.github.com"]
    got = outcomes({"network": {"allowedDomains": ["*.github.com"], "deniedDomains": every_upload_host}})
    assert got["exfil-via-allowed-domain"] == "blocked"


def test_a_wildcard_minus_a_blocklist_misses_upload_hosts() -> None:
    # real github.com takes release assets at uploads.github.com: denying gist and api is not enough
    policy = load_policy({"network": {"allowedDomains": ["*.github.com"], "deniedDomains": ["gist.github.com", "api.github.com"]}})
    assert sorted(c.host for c in channels(access_for(policy, load_world()))) == ["npm.pkg.github.com", "uploads.github.com"]
    assert outcomes(policy.normalize())["exfil-via-allowed-domain"] == "succeeded"


def test_exfil_paths_pair_every_readable_secret_with_every_channel() -> None:
    access = access_for(load_policy(NAIVE), load_world())
    chans = channels(access)
    assert sorted(c.host for c in chans) == ["api.github.com", "gist.github.com", "npm.pkg.github.com", "uploads.github.com"]
    assert {c.kind for c in chans} == {"upload"}
    paths = exfil_paths(access)
    loot = load_world().loot  # secrets and credentials: the naive policy reads them all
    assert len(paths) == len(loot) * 4
    assert {p.secret for p in paths} == {s.path for s in loot} > {s.path for s in load_world().secrets}


# --- every probe, every time ----------------------------------------------------------------


@pytest.mark.parametrize("source", [NAIVE, SECURE, PRACTICE])
def test_every_probe_is_predicted_with_a_sentence(source: Path) -> None:
    result = predict(load_policy(source))
    assert [p.id for p in result.probes] == [p.id for p in PROBES]
    for p in result.probes:
        assert p.outcome in ("blocked", "succeeded")
        assert p.explanation.strip() and p.explanation[-1] in ".)", p.explanation
        assert p.evidence == ()
    assert result.backend == "static"


def test_prediction_is_deterministic() -> None:
    assert predict(load_policy(NAIVE)) == predict(load_policy(NAIVE))


# --- lints --------------------------------------------------------------------------------


def test_lint_warns_about_a_github_wildcard() -> None:
    warnings = lint(load_policy(NAIVE))
    pointers = {w.pointer for w in warnings}
    # and, reads being open by default under srt, the secrets the naive setup leaves readable (said at denyRead)
    assert pointers == {"/network/allowedDomains/0", "/filesystem/denyRead"}
    text = " ".join(w.message for w in warnings)
    assert "gist.github.com" in text and "accept uploads" in text
    assert 'does not match github.com itself' in text


@pytest.mark.parametrize(
    ("wildcard", "upload_hosts"),
    [
        ("*.github.com", ["gist.github.com", "api.github.com", "uploads.github.com", "npm.pkg.github.com"]),
        ("*.pypi.org", ["upload.pypi.org", "test.pypi.org"]),
        ("*.npmjs.org", ["registry.npmjs.org"]),
        ("*.githubusercontent.com", []),  # raw files, release assets, gists: downloads only
        ("*.pythonhosted.org", []),
        ("*.npmjs.com", []),  # the website; publishing goes to registry.npmjs.org
    ],
)
def test_lint_names_every_upload_host_a_wildcard_reaches(wildcard: str, upload_hosts: list[str]) -> None:
    found = [w.message for w in lint(load_policy({"network": {"allowedDomains": [wildcard]}})) if "accept uploads" in w.message]
    expected = [f'"{wildcard}" also reaches {", ".join(upload_hosts)}, which accept uploads'] if upload_hosts else []
    assert [m.split(":")[0] for m in found] == expected


def test_the_practice_solution_has_no_warnings_and_the_seeds_secure_setup_is_told_its_secrets_stay_readable() -> None:
    """The seed's secure setup scopes writes and the network, not reads: under srt (reads open by default) every secret
    stays readable, and the editor says so before any run; the task's solution hides them and gets no warning."""
    assert lint(load_policy(PRACTICE)) == ()
    (warning,) = lint(load_policy(SECURE))
    assert warning.pointer == "/filesystem/denyRead" and "stay readable" in warning.message


@pytest.mark.parametrize(
    ("data", "pointer", "fragment"),
    [
        ({"filesystem": {"allowWrite": ["/var/run/docker.sock"]}}, "/filesystem/allowWrite/0", "outside the simulated machine"),
        ({"filesystem": {"denyRead": ["/usr/lib"]}}, "/filesystem/denyRead/0", "part of the runtime"),
        # a denied file is lifted only by an allowRead of that very file: srt's /dev/null lands over the write bind
        ({"filesystem": {"allowWrite": ["/project/.env"], "denyRead": ["/project/.env"]}}, "/filesystem/allowWrite/0", "writes there never reach the real file"),
        ({"network": {"allowedDomains": ["192.0.2.1"]}}, "/network/allowedDomains/0", "is an IP address"),
        ({"network": {"allowedDomains": ["example.com"]}}, "/network/allowedDomains/0", "not a host of the simulated internet"),
        ({"network": {"allowedDomains": ["xn--gthub-n2e.com"]}}, "/network/allowedDomains/0", "internationalized name"),
        ({"network": {"deniedDomains": ["gist.github.com"]}}, "/network/deniedDomains", "no effect while allowedDomains is empty"),
    ],
)
def test_lints(data: dict[str, Any], pointer: str, fragment: str) -> None:
    found = [w for w in lint(load_policy(data)) if fragment in w.message]
    assert found, lint(load_policy(data))
    assert found[0].pointer == pointer


def test_check_says_grade_counts_a_grant_outside_the_world_exactly_where_grading_does() -> None:
    """Issue 22: `check` said a grant outside the simulated machine "changes nothing here" while `grade` counts it
    as an over-grant. The lint now says so for exactly the rules grading counts; deny rules there, and a grant a
    deny takes back, still change nothing."""
    import re

    from grader.core.needs import Needs, overgrants
    from grader.core.scope import predict_scope

    raw = {"filesystem": {"allowRead": ["/project/src", "/root", "/usr", "/var/run/docker.sock", "/opt/x"],
                          "denyRead": ["/opt/x", "/srv"],
                          "allowWrite": ["/project/out", "/var/run/docker.sock", "/etc/cron.d", "/tmp"], "denyWrite": ["/srv"]},
           "network": {"allowedDomains": []}}
    policy = load_policy(raw)
    access = access_for(policy, load_world())
    found = overgrants(predict_scope(access), Needs(read=("/project/src",), write=("/project/out",)), access)
    graded = {m.group(0) for o in found if (m := re.search(r"/filesystem/\w+/\d+", o.advice))}
    # under srt an allowRead no denyRead surrounds grants nothing (reads are open anyway): only /opt/x, which
    # re-opens its own denyRead, and the write grants count
    assert graded == {"/filesystem/allowRead/4", "/filesystem/allowWrite/1", "/filesystem/allowWrite/2", "/filesystem/allowWrite/3"}
    warned = {w.pointer: w.message for w in lint(policy) if w.pointer.startswith("/filesystem/")}
    counted = {p for p, m in warned.items() if "`grade` counts it as more than the job needs" in m}
    assert counted == graded
    for p in counted:
        assert "changes nothing here" not in warned[p] and f"delete {p}" in warned[p]
        assert ("least-read" if "allowRead" in p else "least-write") in warned[p]
    assert {p for p, m in warned.items() if "changes nothing here" in m} == {
        "/filesystem/allowRead/1", "/filesystem/allowRead/2", "/filesystem/allowRead/3",
        "/filesystem/denyRead/0", "/filesystem/denyRead/1", "/filesystem/denyWrite/0"}


def test_lint_includes_the_dotdot_warning_from_loading() -> None:
    warnings = lint(load_policy({"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project/.env", "/app/workspace"], "allowWrite": ["/project/src/../out"]}}))
    assert [w.pointer for w in warnings] == ["/filesystem/allowWrite/0"]


# --- names the world does not know fail closed ---------------------------------------------------

UNKNOWN = ["webhook.site", "pastebin.com", "transfer.sh", "x.attacker.example", "localhost", "host.docker.internal",
           "169.254.169.254", "10.0.0.1"]


@pytest.mark.parametrize("name", UNKNOWN)
def test_an_allowed_name_the_world_does_not_know_is_an_open_channel(name: str) -> None:
    """It may be the attacker's own server: a channel, and both exfiltration attacks are predicted to succeed."""
    policy = load_policy({"network": {"allowedDomains": ["pypi.org", "files.pythonhosted.org", name]}})
    chans = channels(access_for(policy, load_world()))
    assert [c.host for c in chans] == [name], chans
    assert "attacker" in chans[0].why
    got = predict(policy)
    assert got.outcome("exfil-secret").outcome == "succeeded" and name in explanation(got, "exfil-secret")
    assert got.outcome("exfil-via-allowed-domain").outcome == "succeeded"
    assert got.outcome("net-domain-fronting").outcome == "succeeded"  # its server answers for attacker.example too
    assert got.outcome("net-attacker-domain").outcome == "blocked"  # the proxy still refuses attacker.example by name
    (warning,) = [w for w in lint(policy) if w.pointer == "/network/allowedDomains/2"]
    assert "reaches nothing" not in warning.message and "open channel" in warning.message and f'"{name}"' in warning.message


def test_a_wildcard_over_a_domain_the_world_does_not_know_is_an_open_channel_unless_denied() -> None:
    ngrok = load_policy({"network": {"allowedDomains": ["*.ngrok.io"]}})
    assert [c.host for c in channels(access_for(ngrok, load_world()))] == ["*.ngrok.io"]
    assert "open channel" in lint(ngrok)[0].message
    denied = load_policy({"network": {"allowedDomains": ["webhook.site", "pypi.org"], "deniedDomains": ["webhook.site"]}})
    assert channels(access_for(denied, load_world())) == ()


def test_a_name_under_a_modelled_operators_domain_answers_nothing_and_is_no_channel() -> None:
    """The world knows pypi.org's operator: a name of theirs the world lacks does not exist, and no attacker owns it."""
    policy = load_policy({"network": {"allowedDomains": ["nope.pypi.org", "*.pythonhosted.org"]}})
    assert channels(access_for(policy, load_world())) == ()
    assert predict(policy).outcome("exfil-via-allowed-domain").outcome == "blocked"
    assert any("nothing answers it" in w.message for w in lint(policy))


def test_domain_fronting_is_blocked_where_every_allowed_host_answers_only_for_itself() -> None:
    got = predict(load_policy({"network": {"allowedDomains": ["pypi.org", "files.pythonhosted.org", "*.github.com"]}}))
    front = got.outcome("net-domain-fronting")
    assert front.outcome == "blocked" and "domain fronting" in front.explanation and "pypi.org" in front.explanation
    assert predict(None).outcome("net-domain-fronting").outcome == "succeeded"  # the plain container: nothing decides by name
    assert predict(load_policy({"network": {"allowedDomains": []}})).outcome("net-domain-fronting").outcome == "blocked"


# --- a host's ports (issue 22, finding 4) -------------------------------------------------------

TWO_DOWNLOAD_HOSTS = {"filesystem": {"allowWrite": ["/project/out"]},
                      "network": {"allowedDomains": ["pypi.org", "files.pythonhosted.org"]}}


def test_an_allowed_download_host_on_the_attackers_ports_reaches_nothing() -> None:
    """The attack of issue 22: CONNECT pypi.org:4444 (the attacker's raw port) or :53 (its nameserver).

    The proxy lets the name through and the world refuses the port, so neither is a channel, and the
    analyzer's verdicts (no raw connection, no DNS tunnel, no secret leaves) are what a run finds.
    """
    access = access_for(load_policy(TWO_DOWNLOAD_HOSTS), WORLD)
    for host in ("pypi.org", "files.pythonhosted.org"):
        for port in (443, 80):
            ok, why = tunnel(access, host, port)
            assert ok and "allowedDomains" in why, (host, port, why)
        for port in (4444, 53, 22):
            ok, why = tunnel(access, host, port)
            assert not ok and f"serves no port {port}" in why, (host, port, why)
    for host in ("attacker.example", "upload.pypi.org", "webhook.site"):
        ok, why = tunnel(access, host, 4444)
        assert not ok and "the proxy refuses" in why, (host, why)
    assert channels(access) == ()
    result = predict(load_policy(TWO_DOWNLOAD_HOSTS))
    for pid in ("exfil-secret", "net-direct-ip", "net-dns-exfil", "exfil-via-allowed-domain"):
        assert result.outcome(pid).outcome == "blocked", pid


def test_a_name_the_attacker_owns_reaches_all_the_attackers_ports_and_is_a_channel_already() -> None:
    access = access_for(load_policy({"network": {"allowedDomains": ["pypi.org", "webhook.site"]}}), WORLD)
    for port in (4444, 53, 443):
        ok, why = tunnel(access, "webhook.site", port)
        assert ok and "the attacker's server" in why, (port, why)
    assert "webhook.site" in [c.host for c in channels(access)]  # counted before any port is tried


def test_a_direct_connection_of_the_plain_container_reaches_any_port_the_internet_listens_on() -> None:
    """Pinned: the plain container's direct connection carries no name, and the simulated internet's one
    address answers it on any served port (as ``internet.py`` does); it reaches the attacker directly anyway."""
    from grader.core.access import baseline_access

    access = baseline_access(WORLD)
    assert tunnel(access, "pypi.org", 4444)[0] and tunnel(access, "attacker.example", 4444)[0]
    assert not tunnel(access, "pypi.org", 22)[0]
    assert {c.kind for c in channels(access)} >= {"direct", "dns"}
