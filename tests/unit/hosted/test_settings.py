"""A service is its state directory: its keys' prefix, its Redis socket (grader/hosted/settings.py)."""

from __future__ import annotations

from pathlib import Path

from grader.hosted.settings import service_settings


def test_each_directory_has_its_own_prefix_and_queue(tmp_path: Path) -> None:
    a = service_settings({"SANDBOX_LAB_SERVICE_DIR": str(tmp_path / "a")})
    b = service_settings({"SANDBOX_LAB_SERVICE_DIR": str(tmp_path / "b")})
    assert a.prefix != b.prefix and a.queue_name.startswith(a.prefix)
    assert a.redis_url == f"unix://{tmp_path / 'a' / 'redis.sock'}"


def test_the_default_directory_is_under_the_state_home(tmp_path: Path) -> None:
    s = service_settings({"HOME": str(tmp_path)})
    assert s.directory == tmp_path / ".local" / "state" / "sandbox-lab" / "service"
    assert service_settings({"XDG_STATE_HOME": str(tmp_path / "st")}).directory == tmp_path / "st" / "sandbox-lab" / "service"


def test_the_redis_url_and_name_can_be_given() -> None:
    s = service_settings({"SANDBOX_LAB_SERVICE_DIR": "/x", "SANDBOX_LAB_REDIS_URL": "redis://r:6379/2",
                          "SANDBOX_LAB_SERVICE_NAME": "lab-1"})
    assert (s.redis_url, s.name) == ("redis://r:6379/2", "lab-1")


def test_the_version_a_cached_result_is_keyed_by_changes_with_the_code(tmp_path: Path) -> None:
    # a result cached by other code (an upgrade that added a required field) must never answer this code's requests
    import shutil

    import grader
    from grader.core.version import __version__
    from grader.hosted import settings

    here = service_settings({"SANDBOX_LAB_SERVICE_DIR": str(tmp_path / "svc")}).version
    assert here.startswith(__version__ + "+") and len(here.split("+")[1]) == 12
    copy = tmp_path / "grader"
    shutil.copytree(Path(grader.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    fingerprint = settings.code_fingerprint.__wrapped__  # uncached, pointed at the copy below
    real = settings.__file__
    try:
        settings.__file__ = str(copy / "hosted" / "settings.py")
        same = fingerprint()
        (copy / "core" / "evidence.py").write_text((copy / "core" / "evidence.py").read_text() + "\n# changed\n")
        changed = fingerprint()
    finally:
        settings.__file__ = real
    assert same == here.split("+")[1] and changed != same
