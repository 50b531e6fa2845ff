"""The course as a notebook shows it: views (HTML strings, sharing only the palette), widgets (``widgets``
re-exports every widget a lesson imports), the probe board, and the ``%%attack`` cell magic."""
