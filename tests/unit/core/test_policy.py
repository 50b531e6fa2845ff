"""The policy language: every rule of the model and every error, each with its message and JSON pointer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Union

import pydantic
import pytest

from grader import PolicyError, SandboxLabError, load_policy, policy_schema
from grader.core.errors import Problem, json_pointer
from grader.core.policy import LIMITS, Policy, parse_policy

FIXTURES = Path(__file__).parents[2] / "fixtures" / "policies"
Source = Union[str, bytes, dict[str, Any], Path]


def problems(source: Source) -> list[Problem]:
    with pytest.raises(PolicyError) as info:
        load_policy(source)
    return list(info.value.problems)


def only(source: Source) -> Problem:
    found = problems(source)
    assert len(found) == 1, found
    return found[0]


def fs(**lists: list[str]) -> dict[str, Any]:
    return {"filesystem": lists}


def read(entry: str, key: str = "allowRead") -> list[str]:
    return list(getattr(load_policy(fs(**{key: [entry]})).filesystem, key))


# --- valid policies and the normal form -------------------------------------------------------


def test_empty_object_is_the_smallest_policy_and_every_list_is_present_after_normalizing() -> None:
    assert load_policy("{}").normalize() == {
        "filesystem": {"allowRead": [], "denyRead": [], "allowWrite": [], "denyWrite": []},
        "network": {"allowedDomains": [], "deniedDomains": []},
    }


@pytest.mark.parametrize("data", [{"filesystem": {}}, {"network": {}}, {"filesystem": {"denyWrite": []}}])
def test_every_list_may_be_omitted(data: dict[str, Any]) -> None:
    assert load_policy(data).normalize() == load_policy({}).normalize()


def test_the_issue_example_loads() -> None:
    p = load_policy(
        '{"filesystem": {"allowRead": ["/project/src"], "denyRead": [], "allowWrite": ["/project/out"], "denyWrite": []},'
        ' "network": {"allowedDomains": [], "deniedDomains": []}}'
    )
    assert p.filesystem.allowRead == ("/project/src",)
    assert p.filesystem.allowWrite == ("/project/out",)


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("~", "/home/user"),
        ("~/", "/home/user"),
        ("~/x", "/home/user/x"),
        ("~/.ssh/", "/home/user/.ssh"),
        ("/project/src/", "/project/src"),
        ("//project///src//", "/project/src"),
        ("/project/./src/.", "/project/src"),
        ("/project/out/../src", "/project/src"),
        ("/..", "/"),
        ("/../..", "/"),
        ("/", "/"),
    ],
)
def test_paths_are_normalized(raw: str, normal: str) -> None:
    assert read(raw) == [normal]


def test_other_users_home_is_an_error_with_its_pointer() -> None:
    p = only(fs(allowRead=["/ok", "~root/.ssh"]))
    assert p.pointer == "/filesystem/allowRead/1"
    assert '"~root"' in p.message and "only \"~\"" in p.message


def test_dotdot_is_allowed_but_warned_about_with_the_meaning() -> None:
    policy = load_policy(fs(allowWrite=["/project/out/../src"]))
    assert policy.filesystem.allowWrite == ("/project/src",)
    (w,) = policy.warnings
    assert w.pointer == "/filesystem/allowWrite/0"
    assert '".."' in w.message and "'/project/src'" in w.message


def test_no_warning_without_dotdot() -> None:
    assert load_policy(fs(allowRead=["/project/./src"])).warnings == ()


def test_duplicates_are_dropped_in_the_normal_form() -> None:
    p = load_policy(fs(allowRead=["/project/src", "/project/src/", "~/x", "/home/user/x"]))
    assert p.normalize()["filesystem"]["allowRead"] == ["/project/src", "/home/user/x"]


def test_normalize_is_idempotent_on_a_messy_policy() -> None:
    p = load_policy({
        "filesystem": {"allowRead": ["~/a/", "/b//c"], "denyWrite": ["/x/../y"]},
        "network": {"allowedDomains": ["GitHub.COM", "[pypi.org.]", "*.Example.org"], "deniedDomains": ["Bücher.example"]},
    })
    once = p.normalize()
    assert load_policy(once).normalize() == once
    assert once["network"]["allowedDomains"] == ["github.com", "pypi.org", "*.example.org"]
    assert once["network"]["deniedDomains"] == ["bücher.example"]  # srt only lower-cases an entry, never maps it


def test_a_domain_entry_that_can_match_no_host_is_taken_with_a_warning() -> None:
    p = load_policy({"network": {"allowedDomains": ["*.github.com"], "deniedDomains": ["ｇｉｓｔ.github.com"]}})
    assert [w.pointer for w in p.warnings] == ["/network/deniedDomains/0"]
    assert "If you meant gist.github.com" in p.warnings[0].message


def test_canonical_json_is_equal_for_policies_that_mean_the_same() -> None:
    a = load_policy({"filesystem": {"allowRead": ["~/x/"]}})
    b = load_policy({"filesystem": {"allowRead": ["/home/user/x", "/home/user//x"]}, "network": {}})
    assert a.canonical_json() == b.canonical_json()


def test_schema_key_is_accepted_and_not_part_of_the_meaning() -> None:
    p = load_policy({"$schema": "https://sandbox-lab.invalid/policy/v1.json"})
    assert p.normalize() == load_policy({}).normalize()


def test_allowed_domains_written_tells_explicit_empty_from_omitted() -> None:
    assert load_policy({"network": {"allowedDomains": []}}).allowed_domains_written
    assert not load_policy({"network": {}}).allowed_domains_written
    assert not load_policy({}).allowed_domains_written


def test_policy_is_immutable() -> None:
    p = load_policy({})
    with pytest.raises(pydantic.ValidationError):
        p.filesystem = p.filesystem  # type: ignore[misc]


# --- path errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("project/src", "relative path"),
        ("./src", "relative path"),
        ("", "empty path"),
        ("/project/*.py", "globs are not supported"),
        ("/project/src?", "globs are not supported"),
        ("/project/[ab]", "globs are not supported"),
        ("/project/\x00src", "control character"),
        ("/project/\nsrc", "control character"),
        ("/project/\tsrc", "control character"),
        ("/project/\x7fsrc", "control character"),
    ],
)
@pytest.mark.parametrize("key", ["allowRead", "denyRead", "allowWrite", "denyWrite"])
def test_path_errors_name_the_entry_and_how_to_fix_it(entry: str, fragment: str, key: str) -> None:
    p = only(fs(**{key: ["/fine", entry]}))
    assert p.pointer == f"/filesystem/{key}/1"
    assert fragment in p.message


def test_relative_path_error_suggests_absolute_forms() -> None:
    p = only(fs(allowWrite=["out"]))
    assert '"/project/out"' in p.message and '"~/out"' in p.message


def test_path_longer_than_path_max_is_refused() -> None:
    p = only(fs(allowRead=["/" + "a" * LIMITS["path_chars"]]))
    assert p.pointer == "/filesystem/allowRead/0"
    assert str(LIMITS["path_chars"]) in p.message


# --- unknown keys, types, structure -----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "pointer", "suggestion"),
    [
        ({"filesystem": {"allowWrites": ["/project/out"]}}, "/filesystem/allowWrites", '"allowWrite"'),
        ({"filesystem": {"allowread": []}}, "/filesystem/allowread", '"allowRead"'),
        ({"filesystem": {"denyReads": []}}, "/filesystem/denyReads", '"denyRead"'),
        ({"network": {"allowedDomain": []}}, "/network/allowedDomain", '"allowedDomains"'),
        ({"network": {"allowDomains": []}}, "/network/allowDomains", '"allowedDomains"'),
        ({"network": {"deniedDomain": []}}, "/network/deniedDomain", '"deniedDomains"'),
        ({"filesytem": {}}, "/filesytem", '"filesystem"'),
        ({"Network": {}}, "/Network", '"network"'),
    ],
)
def test_unknown_keys_are_errors_with_did_you_mean(data: dict[str, Any], pointer: str, suggestion: str) -> None:
    p = only(data)
    assert p.pointer == pointer
    assert "unknown key" in p.message
    assert f"Did you mean {suggestion}?" in p.message


def test_unknown_key_far_from_any_known_lists_the_known_keys() -> None:
    p = only({"filesystem": {"zzz": []}})
    assert p.pointer == "/filesystem/zzz"
    assert "Known keys here: allowRead, denyRead, allowWrite, denyWrite" in p.message


def test_unknown_key_message_does_not_print_the_value() -> None:
    p = only({"network": {"allowedDomain": ["very-secret-value.example"]}})
    assert "very-secret-value" not in p.message


@pytest.mark.parametrize(
    ("data", "pointer"),
    [
        ({"network": {"allowUnixSockets": ["/var/run/x.sock"]}}, "/network/allowUnixSockets"),
        ({"network": {"allowLocalBinding": True}}, "/network/allowLocalBinding"),
        ({"network": {"httpProxyPort": 8080}}, "/network/httpProxyPort"),
        ({"filesystem": {"allowGitConfig": True}}, "/filesystem/allowGitConfig"),
        ({"ignoreViolations": {}}, "/ignoreViolations"),
        ({"enableWeakerNestedSandbox": True}, "/enableWeakerNestedSandbox"),
    ],
)
def test_sandbox_runtime_only_keys_are_named_as_such(data: dict[str, Any], pointer: str) -> None:
    p = only(data)
    assert p.pointer == pointer
    assert "sandbox-runtime setting that Sandbox Lab does not model" in p.message


@pytest.mark.parametrize("text", ["[]", '["/project"]', "null", "42", '"policy"', "true"])
def test_a_top_level_non_object_is_an_error(text: str) -> None:
    p = only(text.encode())
    assert p.pointer == "/"
    assert "a policy is a JSON object" in p.message


@pytest.mark.parametrize(
    ("data", "pointer", "fragment"),
    [
        ({"filesystem": "/project"}, "/filesystem", "must be a JSON object"),
        ({"filesystem": None}, "/filesystem", "must be a JSON object"),
        ({"network": ["registry.npmjs.org"]}, "/network", "must be a JSON object"),
        ({"filesystem": {"allowRead": "/project/src"}}, "/filesystem/allowRead", "must be a list of strings"),
        ({"network": {"allowedDomains": "registry.npmjs.org"}}, "/network/allowedDomains", "must be a list of strings"),
        ({"filesystem": {"allowRead": [1]}}, "/filesystem/allowRead/0", "must be a string"),
        ({"filesystem": {"allowRead": [None]}}, "/filesystem/allowRead/0", "must be a string"),
        ({"network": {"deniedDomains": [["a.example"]]}}, "/network/deniedDomains/0", "must be a string"),
    ],
)
def test_wrong_types_are_errors_with_pointer(data: dict[str, Any], pointer: str, fragment: str) -> None:
    p = only(data)
    assert p.pointer == pointer
    assert fragment in p.message


def test_all_errors_are_reported_at_once() -> None:
    err_problems = problems(FIXTURES / "many-problems.json")
    assert [p.pointer for p in err_problems] == [
        "/filesystem/allowRead/0",
        "/filesystem/allowRead/1",
        "/filesystem/allowWrites",
        "/network/allowedDomains/0",
        "/network/allowedDomains/1",
        "/network/allowedDomains/2",
    ]
    with pytest.raises(PolicyError) as info:
        load_policy(FIXTURES / "many-problems.json")
    text = str(info.value)
    assert text.startswith(f"{FIXTURES / 'many-problems.json'} is not a valid policy (6 problems)\n")
    assert "  /network/allowedDomains/2: has the port '0443', which is no port" in text


def test_one_problem_is_singular_in_the_heading() -> None:
    with pytest.raises(PolicyError) as info:
        load_policy({"x": 1}, name="mine.json")
    assert str(info.value).splitlines()[0] == "mine.json is not a valid policy (1 problem)"
    assert info.value.source == "mine.json"


def test_policy_error_is_a_value_error_and_a_sandbox_lab_error_with_json() -> None:
    with pytest.raises(PolicyError) as info:
        load_policy({"filesystem": {"allowRead": ["rel"]}})
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, SandboxLabError)
    assert err.as_json() == [{"pointer": "/filesystem/allowRead/0", "message": err.problems[0].message}]


# --- the file itself ----------------------------------------------------------------------


def test_duplicate_keys_are_errors() -> None:
    p = only(FIXTURES / "duplicate-keys.json")
    assert p.pointer == "/filesystem/allowRead"
    assert "appears more than once" in p.message


def test_duplicate_top_level_keys_are_errors() -> None:
    found = problems(b'{"network": {}, "network": {"allowedDomains": ["pypi.org"]}}')
    assert [(p.pointer, "more than once" in p.message) for p in found] == [("/network", True)]


def test_a_utf8_byte_order_mark_is_accepted() -> None:
    assert load_policy(FIXTURES / "bom.json").filesystem.allowWrite == ("/project/out",)
    assert load_policy(b"\xef\xbb\xbf{}").normalize() == load_policy({}).normalize()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(constant: str) -> None:
    p = only(f'{{"filesystem": {{"allowRead": [{constant}]}}}}'.encode())
    assert p.pointer == "/"
    assert "NaN and Infinity are not allowed" in p.message


def test_invalid_json_names_line_and_column() -> None:
    p = only(b'{\n  "filesystem": {"allowRead": ["/a"],}\n}')
    assert p.pointer == "/"
    assert "invalid JSON at line 2, column" in p.message


@pytest.mark.parametrize("content", [b"", b"   \n\t\n"])
def test_an_empty_file_is_an_error(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "empty.json"
    f.write_bytes(content)
    p = only(f)
    assert p.pointer == "/"
    assert "the file is empty" in p.message and '"{}"' in p.message


def test_non_utf8_is_an_error() -> None:
    p = only(FIXTURES / "latin1.json")
    assert p.pointer == "/"
    assert "is not UTF-8" in p.message and "Save the file as UTF-8" in p.message


def test_a_missing_file_is_an_error_not_a_default_policy(tmp_path: Path) -> None:
    p = only(tmp_path / "nope.json")
    assert p.pointer == "/"
    assert "no such file" in p.message


def test_a_directory_is_not_a_policy(tmp_path: Path) -> None:
    assert "is a directory" in only(tmp_path).message


def test_a_pipe_or_a_device_is_refused_and_never_waited_on_but_a_link_is_followed(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.json")  # nobody writes: opening it to read waited forever before
    assert only(tmp_path / "fifo.json").message.startswith("is a pipe or a device, not a policy file.")
    assert only(Path("/dev/zero")).message.startswith("is a pipe or a device, not a policy file.")
    (tmp_path / "real.json").write_text('{"network": {"allowedDomains": ["pypi.org"]}}')
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")  # the learner's own link: followed
    assert load_policy(tmp_path / "link.json").network.allowedDomains == ("pypi.org",)


def test_file_size_limit(tmp_path: Path) -> None:
    f = tmp_path / "big.json"
    f.write_bytes(b"{" + b" " * LIMITS["file_bytes"] + b"}")
    p = only(f)
    assert p.pointer == "/" and "larger than 1,000,000 bytes" in p.message
    assert "larger than 1,000,000 bytes" in only(b"{" + b" " * LIMITS["file_bytes"] + b"}").message


def test_list_length_limit_points_at_the_list() -> None:
    p = only({"filesystem": {"denyRead": ["/a"] * (LIMITS["list_entries"] + 1)}})
    assert p.pointer == "/filesystem/denyRead"
    assert f"{LIMITS['list_entries'] + 1} entries; the limit is {LIMITS['list_entries']}" in p.message


def test_a_list_at_the_limit_is_fine() -> None:
    load_policy({"filesystem": {"denyRead": ["/a"] * LIMITS["list_entries"]}})


CLAUDE_CODE_60 = Path(__file__).parents[2] / "fixtures" / "policies" / "claude-code-60.json"


def test_a_realistic_claude_code_list_of_60_hosts_loads() -> None:
    """Registries, code hosts and APIs a Claude Code user lists: the old cap of 10 refused it."""
    assert len(load_policy(CLAUDE_CODE_60).network.allowedDomains) == 60


def test_allowed_domains_at_the_cap_load_and_one_more_is_refused_with_the_limit() -> None:
    cap = LIMITS["allowed_domains"]
    assert cap >= 64  # realistic lists are dozens long (the fixture above); see LIMITS for the measurement
    load_policy({"network": {"allowedDomains": [f"h{i}.example.net" for i in range(cap)]}})
    p = only({"network": {"allowedDomains": [f"h{i}.example.net" for i in range(cap + 1)]}})
    assert p.pointer == "/network/allowedDomains"
    assert f"{cap + 1} entries; Sandbox Lab runs at most {cap} allowed domains" in p.message
    assert "List only the hosts the job talks to" in p.message


def test_a_thousand_wildcards_are_refused_at_load_never_left_to_a_run_that_says_rerun() -> None:
    """The issue that set the first cap: 1,000 wildcard entries ended every run in "evidence incomplete; rerun"."""
    p = only({"network": {"allowedDomains": [f"*.d{i}.example.com" for i in range(1000)]}})
    assert p.pointer == "/network/allowedDomains"
    assert f"runs at most {LIMITS['allowed_domains']} allowed domains" in p.message
    assert "rerun" not in p.message.lower()


def test_the_schema_tells_editors_the_cap() -> None:
    net = policy_schema()["$defs"]["NetworkPolicy"]["properties"]["allowedDomains"]
    assert net["maxItems"] == LIMITS["allowed_domains"] and "At most 100 entries" in net["description"]


def test_nesting_depth_limit() -> None:
    depth = LIMITS["nesting_depth"] + 1
    p = only(("[" * depth + "]" * depth).encode())
    assert p.pointer == "/" and "nested deeper than" in p.message
    # brackets inside strings do not count
    load_policy(json.dumps({"$schema": "[" * (depth + 10) + "{" * 5}))


# --- domains inside a policy (the rules themselves: test_domains.py) -----------------------------


def test_domain_errors_point_into_the_network_lists() -> None:
    found = problems({"network": {"allowedDomains": ["registry.npmjs.org", "*"], "deniedDomains": ["x.example", "a.*.b"]}})
    assert [p.pointer for p in found] == ["/network/allowedDomains/1", "/network/deniedDomains/1"]
    assert '"*" would allow every host' in found[0].message
    assert 'leading "*."' in found[1].message


# --- loading from every kind of source --------------------------------------------------------


def test_sources_dict_text_bytes_path_and_str_path_agree(tmp_path: Path) -> None:
    data = {"filesystem": {"allowWrite": ["/project/out"]}}
    f = tmp_path / "p.json"
    f.write_text(json.dumps(data))
    loaded = [load_policy(data), load_policy(json.dumps(data)), load_policy(json.dumps(data).encode()), load_policy(f), load_policy(str(f))]
    assert len({p.canonical_json() for p in loaded}) == 1


def test_parse_policy_takes_already_parsed_data() -> None:
    assert isinstance(parse_policy({"network": {"allowedDomains": ["pypi.org"]}}), Policy)
    with pytest.raises(PolicyError):
        parse_policy([], "x")


# --- schema and pointers ----------------------------------------------------------------------


def test_schema_forbids_unknown_keys_and_describes_every_field() -> None:
    schema = policy_schema()
    assert schema["$id"].endswith("/policy/v1.json")
    assert schema["additionalProperties"] is False
    defs = schema["$defs"]
    for name in ("FilesystemPolicy", "NetworkPolicy"):
        assert defs[name]["additionalProperties"] is False
        for field in defs[name]["properties"].values():
            assert field.get("description")
    json.dumps(schema)


@pytest.mark.parametrize(
    ("loc", "pointer"),
    [((), "/"), (("network", "allowedDomains", 0), "/network/allowedDomains/0"), (("a/b", "c~d"), "/a~1b/c~0d")],
)
def test_json_pointer(loc: tuple[Union[str, int], ...], pointer: str) -> None:
    assert json_pointer(loc) == pointer


def test_the_error_tree() -> None:
    from grader.core import errors

    assert issubclass(errors.PolicyError, errors.SandboxLabError) and issubclass(errors.PolicyError, ValueError)
    assert issubclass(errors.TaskError, errors.SandboxLabError) and issubclass(errors.TaskError, LookupError)
    assert issubclass(errors.BackendError, errors.SandboxLabError) and issubclass(errors.BackendError, RuntimeError)
    for cls in (errors.DockerUnavailable, errors.ImageBuildError, errors.InfrastructureError, errors.ProbeTimeout):
        assert issubclass(cls, errors.BackendError)
    message = str(errors.DockerUnavailable("socket refused"))
    assert "(socket refused)" in message and "scripts/ensure-docker" in message and "--backend static" in message


@pytest.mark.parametrize("text, cause", [
    ('{"filesystem": {"denyRead": ["~",]}}', "trailing comma at /filesystem/denyRead"),
    ("{'network': {}}", "single-quoted key"),
    ('{"network": {"allowedDomains": [], "deniedDomains": None}}', "Python's None"),
])
def test_a_policy_with_invalid_json_names_the_likely_cause(text: str, cause: str) -> None:
    """The editor and the CLI show this message: "Expecting value" alone left a learner guessing (issue 41)."""
    with pytest.raises(PolicyError) as caught:
        load_policy(text)
    message = caught.value.problems[0].message
    assert message.startswith("invalid JSON at line 1") and cause in message, message
