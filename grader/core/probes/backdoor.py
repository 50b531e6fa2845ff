"""The persistence channel: a backdoor written inside the sandbox that fires in the next session, outside it.

The write is judged as any write (its marker in the world copy); what the
backdoor then did in the next session, played outside the sandbox
(``next_session``), is its evidence, not its verdict.

Pure.
"""

from __future__ import annotations

from grader.core.access import Access
from grader.core.evidence import Evidence, Verdict, backdoor_sightings, judge_write
from grader.core.next_session import KEY, MARKER_KEY, SETTINGS, backdoor_line, step_for, widened_settings
from grader.core.probes.record import OrderContext, Prediction, Probe, Step, fix_write_attack
from grader.core.world import World
from grader.protocol.wire import Widen, WriteStep

__all__ = ["backdoor_probe"]


def _backdoor_url(p: Probe, ctx: OrderContext) -> str:
    return f"http://{ctx.markers.attacker}{ctx.markers.next_path(p.id)}"


def _backdoor_orders(p: Probe, ctx: OrderContext) -> list[Step]:
    assert p.target
    marker = ctx.markers.write(p.id)
    if p.target == SETTINGS:
        # widened in place, so the file keeps its canary (the scope scan reads it in the same run)
        text = widened_settings(ctx.settings, ctx.markers.attacker, marker)
        widen = Widen(domains=(ctx.markers.attacker,), key=MARKER_KEY, marker=marker)
        return [WriteStep(path=ctx.rebase(p.target), text=text, append=False, widen=widen)]
    line = backdoor_line(_backdoor_url(p, ctx))
    if p.target.endswith("/.git/hooks/pre-commit"):
        return [WriteStep(path=ctx.rebase(p.target), text=f"# {marker}\n{line}\n", append=True, after_first_line=True)]
    return [WriteStep(path=ctx.rebase(p.target), text=f"\n# {marker}\n{line}\n", append=True)]


def _key_name(world: World) -> str:
    return "~" + KEY[len(world.home):] if KEY.startswith(world.home + "/") else KEY


def _consequence(target: str, world: World) -> str:
    """When a backdoor written to ``target`` fires, in the learner's words."""
    if target == SETTINGS:
        return "in the next sandboxed session, which reads its rules from there"
    step = step_for(world, target)
    return step.when if step else "when the user next runs it"


def _backdoor_predict(p: Probe, access: Access) -> Prediction:
    assert p.target
    d = access.write(p.target)
    if not d.allowed:
        return False, f"{p.target} is not writable: {d.why}."
    w = access.world
    return True, (f"{p.target} is writable: {d.why}. A backdoor written there runs {_consequence(p.target, w)}, "
                  f"outside this sandbox, and sends {_key_name(w)} to {w.attacker.name}.")


def _backdoor_judge(p: Probe, ev: Evidence, world: World) -> Verdict:
    assert p.target
    verdict = judge_write(p.id, p.target, ev)
    if verdict.outcome != "succeeded":
        return verdict
    key, attacker, ns = _key_name(world), world.attacker.name, ev.next_session
    seen = backdoor_sightings(ev, world, p.id, KEY)
    if seen and p.target == SETTINGS and ns is not None:
        line = f"the next sandboxed session read the rewritten settings ({ns.settings}) and sent {key} to {attacker}: {seen[0]}"
    elif seen:
        line = f"the backdoor ran {_consequence(p.target, world)} and sent {key} to {attacker}: {seen[0]}"
    else:
        line = f"the write landed, but the backdoor did not fire in the next session: {_not_fired(p.target, ev, world)}"
    return Verdict(verdict.outcome, f"{verdict.why} Its backdoor {'fired' if seen else 'did not fire'} in the next session.", (*verdict.proof, line))


def _not_fired(target: str, ev: Evidence, world: World) -> str:
    """Why nothing of a landed backdoor reached the attacker: said exactly, never guessed."""
    ns = ev.next_session
    if ns is None:
        return "this backend does not play the next session"
    if ns.infra_problem:
        return f"cannot tell: {ns.infra_problem}"
    if target == SETTINGS:
        return ns.settings or ns.skipped or "the next sandboxed session was not run"
    if ns.skipped:
        return ns.skipped
    step = step_for(world, target)
    if step is None or step.id not in ns.played:
        return f"nothing the next session played runs {target}"
    late = " (the next session ran out of time)" if ns.timed_out else ""
    return f"{step.id} ran{late}, but nothing carrying the key's canary reached {world.attacker.name}"


def backdoor_probe(pid: str, story: str, target: str) -> Probe:
    """An attack that plants a backdoor in the world file ``target``, which something outside the sandbox runs later."""
    return Probe(pid, "attack", "write", story, _backdoor_orders, _backdoor_predict, _backdoor_judge, fix_write_attack,
                 target=target)
