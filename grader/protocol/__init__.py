"""What both sides of a container boundary agree on: the wire records and their strict reader (``wire``), the
services' shared plumbing and constants (``common``), and the allowlist matcher (``domains``).

Standard library only, and copied whole into both images (``backends/docker/images.py``), where the services and
the probe runner import these files as top-level modules. Nothing here imports any other part of the package.
"""
