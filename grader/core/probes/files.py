"""The filesystem channel: reading a world file and changing one, as an attack or as the job's own work.

The read and write families mirror each other (orders, predict, judge, fixes):
they are two axes of one language, kept apart where each says its own thing
to a learner, and one where they do not (the judge). Adding a world path to
read or write is one line in ``registry.PROBES``.

Pure.
"""

from __future__ import annotations

from grader.core.access import Access
from grader.core.evidence import Evidence, Verdict, judge_read, judge_write
from grader.core.probes.record import OrderContext, Prediction, Probe, ProbeKind, Step, fix_write_attack, parent, rule_text
from grader.core.world import World
from grader.protocol.wire import ReadStep, WriteStep

__all__ = ["read_probe", "write_probe"]


def _judge(p: Probe, ev: Evidence, world: World) -> Verdict:
    """Did the file's canary leave (a read), or did the file change (a write): from the world copy alone."""
    assert p.target
    return (judge_read if p.action == "read" else judge_write)(p.id, p.target, ev)


# --- reading a world file -------------------------------------------------------------------


def _read_orders(p: Probe, ctx: OrderContext) -> list[Step]:
    assert p.target
    return [ReadStep(path=ctx.rebase(p.target))]


def _read_predict(p: Probe, access: Access) -> Prediction:
    assert p.target
    d = access.read(p.target)
    files = {f.path: f.label for f in access.world.files}
    if d.allowed and p.kind == "attack":
        return True, f"Your policy lets the agent read {p.target} ({files.get(p.target, p.target)}): {d.why}."
    return d.allowed, f"{p.target} is {'readable' if d.allowed else 'unreadable'}: {d.why}."


def _read_fix_attack(p: Probe, access: Access) -> str:
    assert p.target
    d = access.read(p.target)
    hide = parent(p.target) if p.target.count("/") > 2 else p.target
    if d.rule:  # a grant re-opens it inside a denyRead
        return f'narrow or remove {rule_text(d.rule)}, which re-opens it; reads are hidden only by filesystem.denyRead'
    return (
        f'add "{hide}" to filesystem.denyRead (reads are allowed by default; re-open what the job reads inside a '
        "denied region with filesystem.allowRead)"
    )


def _read_fix_job(p: Probe, access: Access) -> str:
    assert p.target
    d = access.read(p.target)
    if d.rule and d.rule[0] == "denyRead":
        return f're-open it: add "{parent(p.target)}" to filesystem.allowRead (it wins inside {rule_text(d.rule)}), or narrow that denyRead'
    return f'add "{parent(p.target)}" to filesystem.allowRead'


def read_probe(pid: str, kind: ProbeKind, story: str, target: str) -> Probe:
    """A probe that reads the world file ``target``: an attack should fail, the job's read should work."""
    fix = _read_fix_attack if kind == "attack" else _read_fix_job
    return Probe(pid, kind, "read", story, _read_orders, _read_predict, _judge, fix, target=target)


# --- changing a world file --------------------------------------------------------------------


def _write_orders(p: Probe, ctx: OrderContext) -> list[Step]:
    assert p.target
    # an attack appends (a backdoor keeps the file working); the job writes its own file
    text = f"\n# {ctx.markers.write(p.id)}\n"
    return [WriteStep(path=ctx.rebase(p.target), text=text, append=p.kind == "attack")]


def _write_predict(p: Probe, access: Access) -> Prediction:
    assert p.target
    d = access.write(p.target)
    return d.allowed, f"{p.target} is {'writable' if d.allowed else 'not writable'}: {d.why}."


def _write_fix_job(p: Probe, access: Access) -> str:
    assert p.target
    d = access.write(p.target)
    if d.rule and d.rule[0] in ("denyWrite", "denyRead"):
        return f"remove or narrow {rule_text(d.rule)}, which keeps it from being written"
    return f'add "{parent(p.target)}" to filesystem.allowWrite'


def write_probe(pid: str, kind: ProbeKind, story: str, target: str) -> Probe:
    """A probe that writes the world file ``target``: an attack appends to it, the job writes its own file."""
    fix = fix_write_attack if kind == "attack" else _write_fix_job
    return Probe(pid, kind, "write", story, _write_orders, _write_predict, _judge, fix, target=target)
