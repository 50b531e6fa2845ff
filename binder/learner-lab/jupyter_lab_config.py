"""The learner lab's JupyterLab settings that need a path: the lab extensions kept beside this file.

``labextensions/sandbox-lab-narrow`` collapses the left sidebar at first load on a narrow screen (README.md).
It is found wherever this directory is on ``JUPYTER_CONFIG_PATH`` (``make lab``, Binder's ``start``, the browser
tests), with nothing to install or build.
"""

import os

c = get_config()  # noqa: F821 - provided by traitlets when JupyterLab loads this file

c.LabApp.extra_labextensions_path = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "labextensions")]
