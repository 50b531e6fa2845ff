"""The probes: one record per probe, holding everything about it in one place, one module per channel family.

A record (``record.Probe``) says what a compromised agent tries (or what the
legitimate job needs) in one sentence of story, and carries the four things
every part of Sandbox Lab needs from it, side by side, so they cannot drift
apart:

* ``orders``: the steps the runner inside the sandbox carries out, built by the
  host with the run's markers (``evidence.Markers``); the runner only executes;
* ``predict``: the static prediction from the policy's semantics (``Access``);
* ``judge``: the verdict of a real run, from evidence alone;
* ``fix``: the concrete change to a policy when the probe's outcome is wrong.

This is the shape of ``srt_notes.RULES``: a table of records, not branches.
The channel families fill records in (``files``: reads and writes;
``backdoor``: persistence; ``network``: direct IP, DNS, the attacker's domain,
the host; ``fronting``; ``exfil``: uploads and stolen secrets; ``fetch``: the
job's downloads), ``scan`` writes the scope scan's orders, and ``registry``
puts every probe in its order (``PROBES``). A probe on a new channel is a new
module here and its entry in ``registry``.

This package re-exports the registry's public API; nothing else of it is
imported from outside.
"""

from __future__ import annotations

from grader.core.probes.record import OrderContext, Probe, ProbeKind, Step
from grader.core.probes.registry import PROBES, orders_for, probe
from grader.core.probes.scan import SCAN_WIDTH, scan_orders

__all__ = ["PROBES", "SCAN_WIDTH", "OrderContext", "Probe", "ProbeKind", "Step", "orders_for", "probe", "scan_orders"]
