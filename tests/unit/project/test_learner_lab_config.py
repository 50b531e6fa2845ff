"""The learner lab's Jupyter configuration (binder/learner-lab): the nbgrader pieces it turns off exist, and both
ways a learner gets the lab (``make lab``, Binder's ``start``) use it while ``make lab-instructor`` does not.

The browser test (tests/browser/test_learner_lab.py) checks the lab itself shows no instructor tool.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "binder" / "learner-lab"
INSTRUCTOR_ONLY = {"@jupyter/nbgrader:menu", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list"}


def _recipe(target: str) -> str:
    """The recipe of one Makefile target (its indented lines)."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert m, f"no target {target} in the Makefile"
    return m.group(1)


def test_the_learner_lab_disables_nbgrader_s_instructor_plugins_and_keeps_validate() -> None:
    disabled = json.loads((CONFIG / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert {k for k, v in disabled.items() if v is True} == INSTRUCTOR_ONLY
    server = json.loads((CONFIG / "jupyter_server_config.d" / "sandbox-lab-learner.json").read_text())
    assert server["ServerApp"]["jpserver_extensions"] == {
        "nbgrader.server_extensions.formgrader": False, "nbgrader.server_extensions.course_list": False}


def test_the_disabled_plugin_ids_are_nbgrader_s_own() -> None:
    """A misspelled id disables nothing and says nothing: every one must be a plugin the installed nbgrader ships."""
    import nbgrader

    shipped = "".join(p.read_text(errors="replace") for p in Path(nbgrader.__file__).parent.glob("labextension/static/*.js"))
    if not shipped:
        pytest.fail("nbgrader's lab extension is not where it should be (nbgrader/labextension/static)")
    ids = set(re.findall(r'id:"(@jupyter/nbgrader:[a-z-]+)"', shipped))
    assert INSTRUCTOR_ONLY <= ids, f"not nbgrader plugins: {sorted(INSTRUCTOR_ONLY - ids)} (nbgrader ships {sorted(ids)})"
    assert "@jupyter/nbgrader:validate-assignment" in ids  # the one the learner keeps


def test_make_lab_and_binder_use_the_learner_configuration_and_the_instructor_lab_does_not() -> None:
    assert "$(LEARNER_CONFIG)" in _recipe("lab") and "JUPYTER_CONFIG_PATH=" in _recipe("lab")
    assert "LEARNER_CONFIG := $(CURDIR)/binder/learner-lab" in (ROOT / "Makefile").read_text()
    assert "JUPYTER_CONFIG_PATH" not in _recipe("lab-instructor") and "learner-lab" not in _recipe("lab-instructor")
    start = (ROOT / "binder" / "start").read_text()
    assert re.search(r'^export JUPYTER_CONFIG_PATH=".*/learner-lab', start, re.M), start


def test_the_learner_lessons_ship_the_document_lesson_02_links_to() -> None:
    """JupyterLab resolves ../../docs/ from a lesson's folder to the root's docs/ in the learner lab."""
    script = (ROOT / "scripts" / "learner-lessons").read_text()
    assert 'cp docs/srt-differences.md "$out/docs/"' in script
    lesson = (ROOT / "lessons" / "02-naive-vs-secure" / "naive-vs-secure.md").read_text()
    for target in re.findall(r"\]\((\.\./\.\./docs/[^)]+)\)", lesson):
        name = target.removeprefix("../../docs/")
        assert (ROOT / "docs" / name).is_file() and f"docs/{name}" in script, target


def test_the_default_setting_overrides_are_settings_jupyterlab_has() -> None:
    """A misspelled setting is dropped without a word (and a wrong value voids the plugin's settings): each key must
    be in the installed JupyterLab's schema for its plugin, with a value of the schema's type."""
    from jupyterlab.commands import get_app_dir

    overrides = json.loads((CONFIG / "labconfig" / "default_setting_overrides.json").read_text())
    schemas = Path(get_app_dir()) / "schemas"
    for plugin, values in overrides.items():
        package, name = plugin.rsplit(":", 1)
        schema = json.loads((schemas / package / f"{name}.json").read_text())
        for key, value in values.items():
            assert key in schema["properties"], f"{plugin}: no setting {key!r}"
            kind = schema["properties"][key]["type"]
            assert {"boolean": bool, "string": str, "object": dict}[kind] is type(value), (plugin, key, value)


def test_the_narrow_screen_extension_is_found_by_jupyterlab_from_the_learner_config() -> None:
    """The learner config's jupyter_lab_config.py points JupyterLab at labextensions/ beside it, where the hand-written
    ``sandbox-lab-narrow`` is a valid prebuilt extension: its package names the file that registers its container."""
    from jupyterlab_server.config import get_federated_extensions
    from traitlets.config import PyFileConfigLoader

    loaded = PyFileConfigLoader("jupyter_lab_config.py", path=str(CONFIG)).load_config()
    paths = list(loaded.LabApp.extra_labextensions_path)
    assert paths == [str(CONFIG / "labextensions")]
    found = get_federated_extensions(paths)
    assert set(found) == {"sandbox-lab-narrow"}
    ext = found["sandbox-lab-narrow"]["jupyterlab"]["_build"]
    entry = (CONFIG / "labextensions" / "sandbox-lab-narrow" / ext["load"]).read_text()
    assert ext["extension"] == "./extension" and '_JUPYTERLAB["sandbox-lab-narrow"] = container' in entry
    assert "window.innerWidth > NARROW" in entry  # a desktop's first load is left alone
