"""The command line: argv in, exit codes out.

A command of this package does not load pydantic's plugins: finding them scans
the metadata of every installed distribution (hundreds in a lab environment),
about 60 ms of a 0.3 s ``check``. ``PYDANTIC_DISABLE_PLUGINS`` is set to
``__all__`` here, before any model is built, unless the caller set it (set it
empty to load plugins again). The processes the commands start (the run
service's API and workers) inherit it. A notebook kernel imports ``grader``,
never ``grader.cli``, and keeps pydantic's default.
"""

import os

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
