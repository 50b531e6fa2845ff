"""The run service: an HTTP API in front of the backends, its bearer tokens, and its workers on a Redis queue.

``grader/services`` is what runs inside the sandbox containers; this package is
the server a learner without a Docker engine sends their policy to
(docs/service-api.md is its contract). It needs the ``service`` extra:
``pip install '.[service]'`` in a checkout (``make venv`` installs it).
"""
