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
