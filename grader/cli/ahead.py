"""What the warm engine prepares ahead: the policy files a terminal probes and the new ones saved beside them,
watched, and each one's next run pre-started, so the next ``sandbox-lab probe`` only sends the go (issue 40).

A terminal's learner edits a policy file, saves it, and probes it again; or
copies it under a new name beside it (``cp naive.json mine.json``), edits the
copy and probes that. After a command ran a plan for a file it named (the
file, read again, is that plan's policy), the engine watches the file, and
keeps one prepared run for it (``course.prestart``: one per file, one
preparation at a time, retired after ``IDLE_S`` unused):

* at once for the same text (a rerun of the same policy), and
* for the new text as soon as a poll sees a saved change that parses as a
  policy (a change that does not parse, or the file removed or renamed away,
  retires the held run).

It also watches the directory of each watched file. A ``*.json`` there that
appeared after the directory began to be watched (the names there then are
noted, not prepared), or that was there and changes later, becomes a watched
file as if a command had probed it, as soon as it parses as a policy:
prepared for the world and target of the last plan run for a file in that
directory, and named as a command would name it (``policies/a.json`` probed:
``policies/b.json``). One that does not parse yet is looked at again when it
changes, never prepared before it parses. Only regular files are looked at: a
link, a directory or a pipe named ``*.json`` is never read.

A save is taken when a poll first sees it, not after it has stood a while: a
learner saves and then types the command, and that second is the whole time
there is to prepare in. A save made of more than one write costs nothing wrong:
a half-written file does not parse (nothing is prepared, and the rest of the
save changes its stamp, so it is looked at again), and a first write that
parses and is then changed only retires a preparation that will never fire.

The next command that runs a plan equal by value to a held run's (the same
policy, world and target) fires it; a preparation of that plan under way is
waited for; any other plan runs cold. So what runs is always the plan the
command built from the file as it is when the command reads it: a held run
prepared for other text is retired, never fired. The name a command uses
decides nothing: naming the file differently from the engine (``./b.json``,
its absolute path, from another directory) fires the held run only where the
plan it builds is equal, and runs cold otherwise, as a command with another
``--task`` (another world or target) does; a file probed for another world or
target has its runs prepared for that one from then on.

Bounds: at most ``WATCH_MAX`` watched files, probed and new ones alike (the
least recently named or adopted goes first; of many saved at once, only the
latest ``WATCH_MAX`` are prepared), so at most ``WATCH_MAX`` held runs, each a
waiting sandbox and the proxy it took (14-27 MiB, ``course.prestart``'s
measurement), for ``IDLE_S`` after the file last changed or ran (a preparation
under way for a file retired meanwhile ends and is removed at once, never
held); a file not named for ``WATCH_S`` is forgotten. What the replay of a
policy like the naive one will want (its internet, the next sandboxed session
with its proxy: about 40 MiB per held run in all) is started at the go
(``next_at_go``), or once no command was served for ``QUIET_S``: making a
rerun ready is one container start while the learner runs something else, and
the rest comes when it crowds nothing. A directory is watched
while a watched file is in it, so at most ``WATCH_MAX`` of them, forgotten with
their files; each poll looks at no more than its first ``LIST_MAX`` entries (in
the order the file system lists them) and keeps one stamp per ``*.json`` among
them. A name the first look did not note (past those entries) counts as new
only if it was made, renamed or changed there after the watch began (its ctime).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Callable, Optional, Sequence

from grader.backends.base import Backend
from grader.core.access import Target
from grader.core.errors import SandboxLabError
from grader.core.execution import Execution, Job
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import Policy, load_policy
from grader.core.world import World
from grader.course.prestart import Prestart

__all__ = ["Ahead", "LIST_MAX", "POLL_S", "QUIET_S", "WATCH_MAX", "WATCH_S"]

WATCH_MAX = 4  # files watched at once: a learner switching between a few policies
WATCH_S = 600.0  # a file no command named for this long is no longer watched
POLL_S = 0.1  # how often watched files and directories are looked at: a few stat calls each time
LIST_MAX = 256  # entries of a watched directory looked at per poll: a folder of thousands costs no more
# no command served for this long: the held runs are made whole (``Prestart.complete``); a command that comes
# sooner (the bench's learner, a second after the last) finds them one waiting sandbox each, as at the go
QUIET_S = 2.0
# a file system stamps ctime with a coarse clock, a tick behind time.time_ns(): a file made in the second before
# a watch began, and not noted by its first look, counts as new
_CTIME_SLACK_NS = 1_000_000_000

_Stamp = tuple[int, int]  # a file's last change (ns) and size


def _stamp(path: Path) -> Optional[_Stamp]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _listing(directory: Path) -> Optional[dict[str, tuple[_Stamp, int]]]:
    """The regular ``*.json`` files among ``directory``'s first ``LIST_MAX`` entries, each with its stamp and when
    it was made, renamed or changed there (ctime, ns); None: it cannot be listed now (an empty answer would make
    every file in it look new when it can be listed again)."""
    found: dict[str, tuple[_Stamp, int]] = {}
    try:
        with os.scandir(directory) as entries:
            for entry in itertools.islice(entries, LIST_MAX):
                # a link is not followed: what it points to is not a policy file the learner saved here
                if not entry.name.endswith(".json") or not entry.is_file(follow_symlinks=False):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # gone since the listing
                found[entry.name] = ((st.st_mtime_ns, st.st_size), st.st_ctime_ns)
    except OSError:
        return None
    return found


@dataclass
class _Watched:
    path: Path
    name: str  # the argument the command named it by: a policy read again is labelled the same
    stamp: Optional[_Stamp]
    prestart: Prestart
    world: World  # what its runs are prepared for: the plan it was last named for
    target: Target
    named_at: float = field(default_factory=time.monotonic)


@dataclass
class _Dir:
    """A directory of watched files: a ``*.json`` saved in it later is prepared as if probed."""

    path: Path
    arg: str  # the argument its last probed file was named by: a new file beside it is named the same way
    world: World  # the world and target of the last plan run for a file in it
    target: Target
    seen: dict[str, _Stamp]  # each listed file's stamp when last dealt with: at first, what was there already
    since_ns: int  # when the watch began (wall clock, as a file's ctime)


def _sibling(arg: str, name: str) -> str:
    """How a command names file ``name`` beside the one it named ``arg`` (``policies/a.json``: ``policies/b.json``)."""
    return os.path.join(os.path.dirname(arg), name)


class _Serving:
    """The kept backend as one command sees it: each plan it runs fires a held run made for it, if any, and is noted."""

    def __init__(self, backend: Backend, ahead: "Ahead") -> None:
        self._backend, self._ahead = backend, ahead

    @property
    def name(self) -> str:
        return self._backend.name

    def run(self, plan: RunPlan) -> RunResult:
        self._ahead.ran.append(plan)
        for w in self._ahead.watched():
            if w.prestart.has(plan):
                return w.prestart.run(plan)
        return self._backend.run(plan)

    def execute(self, plan: RunPlan, job: Job) -> Execution:
        return self._backend.execute(plan, job)

    def close(self) -> None:
        """The engine's backend outlives the command: nothing to let go of here."""

    def __enter__(self) -> "_Serving":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        pass


class Ahead:
    """The watched policy files of one engine, each with its next run prepared on the engine's kept backend."""

    def __init__(self, backend: Callable[[], Backend]) -> None:
        self._backend = backend
        self._lock = threading.Lock()
        self._files: dict[Path, _Watched] = {}
        self._dirs: dict[Path, _Dir] = {}
        self.ran: list[RunPlan] = []  # the plans the current command ran
        self._quiet_since: Optional[float] = time.monotonic()  # None: a command is being served
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="sandbox-lab-ahead", daemon=True)
        self._thread.start()

    def serving(self, backend: Backend) -> Backend:
        """``backend`` for one command: its runs take what was prepared for them."""
        self.ran, self._quiet_since = [], None
        return _Serving(backend, self)

    def watched(self) -> list[_Watched]:
        with self._lock:
            return list(self._files.values())

    def after(self, argv: Sequence[str], cwd: str) -> None:
        """A command ended: watch each file it named whose policy it ran, and its directory, and prepare its rerun."""
        ran, self.ran, self._quiet_since = self.ran, [], time.monotonic()
        for plan in ran:
            if plan.policy is None:
                continue
            for arg in argv[1:]:
                path = Path(cwd, arg)
                if arg.startswith("-") or not path.is_file():
                    continue
                try:
                    if load_policy(path, name=arg) != plan.policy:
                        continue
                except (SandboxLabError, OSError):
                    continue
                self._watch(path, arg, plan.world, plan.target, _stamp(path), plan.policy)
                self._watch_dir(path.parent, arg, plan)

    def _watch(self, path: Path, name: str, world: World, target: Target, stamp: Optional[_Stamp],
               policy: Policy) -> None:
        """Watch ``path`` as the most recent file (retiring the least recent past ``WATCH_MAX``), and prepare the run
        of ``policy``, its text as of ``stamp``."""
        stale: list[_Watched] = []
        with self._lock:
            w = self._files.pop(path, None)
            if w is not None and (w.world, w.target) != (world, target):
                stale.append(w)  # prepared for another world or target: its runs would never fire
                w = None
            if w is None:
                # held runs wait as one sandbox each: the replay's parts start at the go (``next_at_go``) or
                # after ``QUIET_S``, so making one ready does not crowd the machine while the learner probes another
                w = _Watched(path, name, stamp, Prestart(
                    self._backend, plan_for=lambda p: build_plan(p, world=world, target=target), settle_s=0.0,
                    next_at_go=True), world, target)
            w.name, w.stamp, w.named_at = name, stamp, time.monotonic()
            self._files[path] = w  # the most recent last
            while len(self._files) > WATCH_MAX:
                stale.append(self._files.pop(next(iter(self._files))))
            self._keep_dirs()
        for old in stale:
            old.prestart.close()
        w.prestart.offer(policy)  # the rerun of the text a command ran, or a new file's first run

    def _watch_dir(self, directory: Path, arg: str, plan: RunPlan) -> None:
        """Watch the directory of a probed file: what is there now is noted, and what is saved there later prepared
        for ``plan``'s world and target."""
        with self._lock:
            d = self._dirs.get(directory)
            if d is not None:
                d.arg, d.world, d.target = arg, plan.world, plan.target
                return
        since_ns = time.time_ns()
        found = _listing(directory) or {}
        d = _Dir(directory, arg, plan.world, plan.target, {n: stamp for n, (stamp, _) in found.items()}, since_ns)
        with self._lock:
            self._dirs.setdefault(directory, d)
            self._keep_dirs()

    def _keep_dirs(self) -> None:
        """Under the lock: a directory is watched while a watched file is in it, so it goes with its files."""
        held = {w.path.parent for w in self._files.values()}
        for gone in [p for p in self._dirs if p not in held]:
            del self._dirs[gone]

    # --- the polling thread --------------------------------------------------------------

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self._forget(time.monotonic())
            quiet = self._quiet_since
            if quiet is not None and time.monotonic() - quiet >= QUIET_S:
                for w in self.watched():
                    w.prestart.complete()
            self._look_at_files()
            with self._lock:
                dirs = list(self._dirs.values())
            for d in dirs:
                self._look_at_dir(d)

    def _forget(self, now: float) -> None:
        """Stop watching what no command named for ``WATCH_S`` (and a directory left without watched files)."""
        with self._lock:
            stale = [self._files.pop(w.path) for w in list(self._files.values()) if now - w.named_at > WATCH_S]
            self._keep_dirs()
        for w in stale:
            w.prestart.close()

    def _look_at_files(self) -> None:
        """Offer each watched file's saved change as soon as it is seen: its new text, or None (retired) if it does
        not parse or the file is gone."""
        for w in self.watched():
            stamp = _stamp(w.path)
            if stamp == w.stamp:
                continue
            w.stamp = stamp
            policy: Optional[Policy]
            try:
                policy = load_policy(w.path, name=w.name)
            except (SandboxLabError, OSError):
                policy = None  # the command will say what is wrong; the held run goes
            w.prestart.offer(policy)

    def _look_at_dir(self, d: _Dir) -> None:
        """Watch, as if probed, each ``*.json`` in ``d`` that is new or changed since it was last looked at and
        parses."""
        found = _listing(d.path)
        if found is None:
            return
        with self._lock:
            watched = set(self._files)
        changed: list[tuple[_Stamp, str]] = []
        for name, (stamp, made_ns) in found.items():
            if d.path / name in watched:
                d.seen[name] = stamp  # its own watch follows it; retired later, it is not new until it changes
                continue
            if name not in d.seen and made_ns < d.since_ns - _CTIME_SLACK_NS:
                d.seen[name] = stamp  # there before the watch, past the entries the first look saw
                continue
            if d.seen.get(name) == stamp:
                continue
            d.seen[name] = stamp  # looked at again only when it changes
            changed.append((stamp, name))
        # many saved at once (a copied folder): only the last WATCH_MAX could stay watched, so only they are
        # prepared, the latest last (a sandbox started for a file retired at once is Docker's work for nothing)
        for stamp, name in sorted(changed)[-WATCH_MAX:]:
            self._adopt(d, name, stamp)
        for gone in d.seen.keys() - found.keys():  # a name removed and made again is new
            del d.seen[gone]

    def _adopt(self, d: _Dir, name: str, stamp: _Stamp) -> None:
        """A new or changed file beside a watched one: if it parses, watch it and prepare its run, as a command
        naming it by its sibling's path would have."""
        with self._lock:
            if self._dirs.get(d.path) is not d:
                return  # no longer watched
            arg, world, target = _sibling(d.arg, name), d.world, d.target
        try:
            policy = load_policy(d.path / name, name=arg)
        except (SandboxLabError, OSError):
            return  # not a policy yet: looked at again when it changes, never prepared before it parses
        self._watch(d.path / name, arg, world, target, stamp, policy)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * POLL_S + 1)
        with self._lock:
            files, self._files, self._dirs = list(self._files.values()), {}, {}
        for w in files:
            w.prestart.close()
