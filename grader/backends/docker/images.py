"""Container images: the only place Sandbox Lab builds, imports or pulls an image.

A lab runs two images. ``sandbox`` runs the probes as uid 1000 on an empty
skeleton; ``services`` is the simulated internet (DNS server, sinks, egress
proxy). Both are built from the Dockerfiles in ``grader/images/`` on top of one
Debian base, ``sandbox-lab/base:bookworm``, that already has python3 and
openssl, so the Dockerfiles need no package manager and build with no registry
in reach -- the usual case on a classroom or CI machine.

The base comes from ``debian:bookworm-slim`` plus ``apt-get`` where a registry
works, and otherwise from a root filesystem made with ``debootstrap`` (which
needs only a Debian mirror) and imported.

Tags are content hashes (``sandbox-lab/sandbox:3f2a9c1b7d0e``): an image is
reused exactly when its base, its Dockerfile and every file copied into it are
unchanged, so editing a service rebuilds its image and nothing else.

This module takes the engine (the adapter, ``engine.DockerEngine``, or a client
for it to wrap) from its caller and imports nothing from the package except
``grader.core.errors`` and the adapter (``engine``).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from grader.core.errors import BackendError, DockerUnavailable, ImageBuildError
from grader.backends.docker.engine import BuildFailed, DockerEngine, EngineError, ImageRef, Refused
from grader.services import RUNNER_SCRIPTS

__all__ = [
    "BASE_TAG",
    "LABEL_BASE",
    "LABEL_HASH",
    "LABEL_IMAGE",
    "ImageSpec",
    "Images",
    "ensure_images",
    "find_images",
    "image_specs",
    "spec_hash",
]

Progress = Callable[[str], None]

BASE_REPOSITORY = "sandbox-lab/base"
BASE_TAG = f"{BASE_REPOSITORY}:bookworm"
LABEL_BASE = "org.sandbox-lab.base"
LABEL_HASH = "org.sandbox-lab.hash"
LABEL_IMAGE = "org.sandbox-lab.image"

_SLIM = "debian:bookworm-slim"
_DEBIAN_MIRROR = "http://deb.debian.org/debian"
# What both Dockerfiles may assume of the base: python3 runs every probe and
# service, openssl makes the sinks' TLS certificates, ca-certificates lets a
# probe tell a forged certificate from a trusted one.
_BASE_PACKAGES = ("python3", "openssl", "ca-certificates")
# Part of every hash. Bump it when the way a build context is assembled
# changes (file modes, layout) while no file's bytes do, so stale tags are not
# reused.
_RECIPE = b"sandbox-lab/images/1"

_PACKAGE_DIR = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Images:
    """The full tags of the two images a run needs."""

    sandbox: str
    services: str


@dataclass(frozen=True)
class ImageSpec:
    """How to build one image: a Dockerfile and the package files copied next to it.

    Only the ``Dockerfile`` in ``dockerfile_dir`` goes into the build context,
    plus ``files``: pairs of (name in the context, file in the package).
    """

    name: str
    dockerfile_dir: Path
    files: tuple[tuple[str, Path], ...]

    def __post_init__(self) -> None:
        names = [n for n, _ in self.files]
        for n in names:
            if not n or "/" in n or n in (".", "..", "Dockerfile"):
                raise ValueError(f"image {self.name!r}: bad build-context name {n!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"image {self.name!r}: duplicate build-context names")

    @property
    def dockerfile(self) -> Path:
        return self.dockerfile_dir / "Dockerfile"

    @property
    def repository(self) -> str:
        return f"sandbox-lab/{self.name}"

    def tag(self, digest: str) -> str:
        """The tag for a build whose :func:`spec_hash` is ``digest``."""
        return f"{self.repository}:{digest[:12]}"


def image_specs() -> dict[str, ImageSpec]:
    """The images Sandbox Lab builds, by name, read from the installed package.

    Both carry ``protocol/`` whole (the records and their reader, the shared plumbing, the allowlist matcher: what
    both sides of the boundary must agree on), so the list of what an image holds is written here once; each
    Dockerfile copies every file of its context.
    """
    images = _PACKAGE_DIR / "images"
    services = _PACKAGE_DIR / "services"
    protocol = tuple((p.name, p) for p in sorted((_PACKAGE_DIR / "protocol").glob("*.py")) if p.name != "__init__.py")
    return {
        "sandbox": ImageSpec(
            name="sandbox",
            dockerfile_dir=images / "sandbox",
            files=(*((name, services / name) for name in RUNNER_SCRIPTS), *protocol),
        ),
        "services": ImageSpec(
            name="services",
            dockerfile_dir=images / "services",
            # http1 frames requests with h11, nameserver parses DNS with dnslib (python3-h11, python3-dnslib)
            files=(*((f"{m}.py", services / f"{m}.py") for m in ("internet", "proxy", "http1", "nameserver", "tls")),
                   *protocol),
        ),
    }


def spec_hash(spec: ImageSpec, base_id: str) -> str:
    """The sha256 (hex) of everything an image is built from.

    Covers the base image id, the Dockerfile and each context file's name and
    bytes, so a change to any of them yields a new tag and a rebuild.
    """
    return _digest(base_id, _context_entries(spec))


def find_images(engine: DockerEngine) -> Images | None:
    """The images for the current sources if they are already built, else None.

    Never builds, pulls or imports anything.
    """
    with _worded(BackendError, "looking up images"):
        base = engine.image(BASE_TAG)
        if base is None:
            return None
        base_id = str(base.id)
        tags: dict[str, str] = {}
        for name, spec in image_specs().items():
            tag = spec.tag(spec_hash(spec, base_id))
            if engine.image(tag) is None:
                return None
            tags[name] = tag
    return Images(sandbox=tags["sandbox"], services=tags["services"])


def ensure_images(engine: DockerEngine, progress: Progress = print, *, rebuild: bool = False) -> Images:
    """Build whatever images are missing for the current sources and return their tags.

    Never pulls a base at build time (``pull=False``), so it works offline once
    the base exists.

    Args:
        rebuild: rebuild the sandbox and services images without the layer
            cache even if their tags exist. The base is still reused; remove
            ``sandbox-lab/base:bookworm`` to rebuild it.
    """
    start = time.monotonic()
    with _build_lock(progress):
        base_id = _ensure_base(engine, progress)
        tags = {
            name: _ensure_image(engine, spec, base_id, progress, rebuild=rebuild)
            for name, spec in image_specs().items()
        }
    progress(f"images ready in {time.monotonic() - start:.1f}s")
    return Images(sandbox=tags["sandbox"], services=tags["services"])


# --- the two images -------------------------------------------------------------------


def _ensure_image(
    engine: DockerEngine, spec: ImageSpec, base_id: str, progress: Progress, *, rebuild: bool
) -> str:
    # Read the files once: what is hashed is exactly what is built.
    entries = _context_entries(spec)
    digest = _digest(base_id, entries)
    tag = spec.tag(digest)
    with _worded(ImageBuildError, f"building {tag}"):
        if not rebuild and engine.image(tag) is not None:
            progress(f"reusing {tag}")
            return tag
        progress(f"building {tag}")
        began = time.monotonic()
        _build(
            engine, tag, spec.dockerfile,
            fileobj=_context_tar(entries),
            custom_context=True,
            buildargs={"BASE": base_id},
            labels={LABEL_HASH: digest, LABEL_IMAGE: spec.name},
            nocache=rebuild,
        )
    progress(f"built {tag} in {time.monotonic() - began:.1f}s")
    return tag


def _context_entries(spec: ImageSpec) -> list[tuple[str, bytes]]:
    """The build context as (name, bytes), Dockerfile first, then by name."""
    sources = [("Dockerfile", spec.dockerfile), *sorted(spec.files)]
    entries: list[tuple[str, bytes]] = []
    for name, path in sources:
        try:
            entries.append((name, path.read_bytes()))
        except OSError as exc:
            raise ImageBuildError(
                f"Cannot read {path} for the {spec.name} image ({exc.strerror}). "
                "The installed package is incomplete; reinstall sandbox-lab."
            ) from exc
    return entries


def _digest(base_id: str, entries: list[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()

    def feed(chunk: bytes) -> None:
        # Length-prefixed, so no two different inputs run together the same way.
        h.update(len(chunk).to_bytes(8, "big"))
        h.update(chunk)

    feed(_RECIPE)
    feed(base_id.encode())
    for name, data in entries:
        feed(name.encode())
        feed(data)
    return h.hexdigest()


def _context_tar(entries: list[tuple[str, bytes]]) -> io.BytesIO:
    """An in-memory build context: root-owned 0644 files with a fixed mtime."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


# --- the base -------------------------------------------------------------------------


def _ensure_base(engine: DockerEngine, progress: Progress) -> str:
    """Return the id of ``sandbox-lab/base:bookworm``, making it first if needed."""
    with _worded(ImageBuildError, "preparing the base image"):
        existing = engine.image(BASE_TAG)
        if existing is not None:
            progress(f"base image: {BASE_TAG} (reused)")
            return str(existing.id)
        slim = engine.image(_SLIM)
        if slim is None:
            slim = _try_pull_slim(engine, progress)
        if slim is not None:
            return _base_from_slim(engine, progress)
    return _base_from_debootstrap(engine, progress)


def _try_pull_slim(engine: DockerEngine, progress: Progress) -> Optional[ImageRef]:
    repository, tag = _SLIM.split(":")
    try:
        return engine.pull(repository, tag)
    except (EngineError, OSError) as exc:
        # Expected offline: the registry is unreachable. debootstrap needs
        # only a Debian mirror.
        detail = getattr(exc, "explanation", None) or str(exc)
        progress(f"base image: cannot pull {_SLIM} ({_first_line(str(detail))})")
        return None


def _base_from_slim(engine: DockerEngine, progress: Progress) -> str:
    progress(f"base image: building {BASE_TAG} from {_SLIM} (apt-get install {' '.join(_BASE_PACKAGES)})")
    dockerfile = (
        f"FROM {_SLIM}\n"
        "RUN apt-get update \\\n"
        " && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        f"{' '.join(_BASE_PACKAGES)} \\\n"
        " && rm -rf /var/lib/apt/lists/*\n"
    )
    image = _build(
        engine, BASE_TAG, _SLIM,
        hint=f"apt-get needs a Debian mirror; check the network, or remove {_SLIM} to fall back to debootstrap.",
        fileobj=io.BytesIO(dockerfile.encode()),
        labels={LABEL_BASE: "1"},
    )
    return str(image.id)


def _base_from_debootstrap(engine: DockerEngine, progress: Progress) -> str:
    debootstrap = _find_debootstrap()
    if debootstrap is None:
        raise ImageBuildError(
            f"No base image: {_SLIM} is not available locally and cannot be pulled, "
            "and debootstrap (which builds a Debian base from a Debian mirror alone) "
            "is not installed.\n"
            "Fix: `sudo apt-get install debootstrap` (from a Sandbox Lab checkout: `sudo scripts/ensure-docker`), "
            f"or make {_SLIM} available (`docker pull {_SLIM}` where a registry works, "
            "or `docker load`)."
        )
    if not _is_root():
        raise ImageBuildError(
            f"No base image: {_SLIM} is not available locally and cannot be pulled, "
            "and building one with debootstrap needs root.\n"
            "Fix: build the images once as root (e.g. `sudo sandbox-lab setup`), "
            f"or make {_SLIM} available (`docker pull {_SLIM}` or `docker load`)."
        )
    progress(f"base image: building {BASE_TAG} with debootstrap from {_DEBIAN_MIRROR} (about a minute)")
    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="sandbox-lab-base-"))
    try:
        rootfs = workdir / "rootfs"
        rootfs.mkdir()
        _run_debootstrap(debootstrap, rootfs, workdir / "debootstrap.log", progress)
        archive = workdir / "rootfs.tar"
        _tar_rootfs(rootfs, archive)
        progress(f"base image: importing {BASE_TAG}")
        with _worded(ImageBuildError, f"importing {BASE_TAG}"):
            engine.import_image(
                str(archive),
                repository=BASE_REPOSITORY,
                tag=BASE_TAG.split(":")[1],
                changes=[
                    f"LABEL {LABEL_BASE}=1",
                    # An imported root filesystem has no config; give it what
                    # a Debian image has.
                    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "ENV LANG=C.UTF-8",
                    'CMD ["/bin/bash"]',
                ],
            )
            image = engine.image(BASE_TAG)
    finally:
        _remove_workdir(workdir, progress)
    if image is None:
        raise ImageBuildError(f"docker import reported success but {BASE_TAG} does not exist.")
    progress(f"base image: {BASE_TAG} built in {time.monotonic() - began:.1f}s")
    return str(image.id)


def _run_debootstrap(debootstrap: str, rootfs: Path, log: Path, progress: Progress) -> None:
    cmd = [
        debootstrap,
        "--variant=minbase",
        f"--include={','.join(_BASE_PACKAGES)}",
        "bookworm",
        str(rootfs),
        _DEBIAN_MIRROR,
    ]
    with log.open("w") as out, subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                # Stage lines only ("I: Installing core packages..."), not
                # "I: Unpacking libc6..." once per package.
                text = line[3:].strip()
                if line.startswith("I: ") and text.endswith("...") and len(text.split()) > 2:
                    progress(f"base image: debootstrap: {text}")
            code = proc.wait()
        except BaseException:
            _stop(proc)
            raise
    if code != 0:
        raise ImageBuildError(
            f"debootstrap failed (exit {code}). Last lines of its log:\n{_tail(log)}\n"
            f"It needs {_DEBIAN_MIRROR} (a Debian mirror, not a container registry)."
        )


def _stop(proc: subprocess.Popen[str]) -> None:
    # On Ctrl-C debootstrap got SIGINT too. Let it run its exit trap, which
    # unmounts /proc, /sys and (inside a container) the host /dev nodes it
    # bind-mounted into the target; SIGKILL would skip the trap.
    try:
        proc.terminate()
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tar_rootfs(rootfs: Path, archive: Path) -> None:
    cmd = [
        "tar",
        "--numeric-owner",
        # Never archive a filesystem still mounted into the target (the host's
        # /proc, /sys or /dev).
        "--one-file-system",
        # Package caches only make the image bigger; /dev is a tmpfs in every
        # container anyway.
        "--exclude=./var/cache/apt/archives/*.deb",
        "--exclude=./var/lib/apt/lists/*_*",
        "--exclude=./dev/*",
        "--exclude=./proc/*",
        "--exclude=./sys/*",
        "-C",
        str(rootfs),
        "-cf",
        str(archive),
        ".",
    ]
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageBuildError(f"Archiving the debootstrap root filesystem failed: {done.stderr.strip()}")


def _remove_workdir(workdir: Path, progress: Progress) -> None:
    """Delete the debootstrap work dir without ever deleting through a mount into the host.

    If debootstrap died before its exit trap ran, the target may still have
    the host's /proc, /sys, /dev/shm or /dev/pts mounted in it, and a plain
    rmtree would delete the host's files through them.
    """
    root = os.path.realpath(workdir)
    for mount in sorted(_mounts_under(root), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
    still = _mounts_under(root)
    if still:
        progress(f"warning: left {root} in place; still mounted there: {', '.join(still)}")
        return
    try:
        _rmtree_one_filesystem(root, os.lstat(root).st_dev)
    except OSError as exc:
        progress(f"warning: could not remove {root}: {exc}")


def _mounts_under(root: str) -> list[str]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:
            # Mount points escape space, tab, newline and backslash as \ooo.
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point == root or point.startswith(root + "/"):
                found.append(point)
    return found


def _rmtree_one_filesystem(path: str, device: int) -> None:
    with os.scandir(path) as it:
        for entry in it:
            if entry.is_dir(follow_symlinks=False):
                if entry.stat(follow_symlinks=False).st_dev != device:
                    raise OSError(f"{entry.path} is on another filesystem")
                _rmtree_one_filesystem(entry.path, device)
            else:
                os.unlink(entry.path)
    os.rmdir(path)


def _find_debootstrap() -> str | None:
    # /usr/sbin is not on a normal user's PATH on Debian.
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return shutil.which("debootstrap", path=search)


def _is_root() -> bool:
    if sys.platform == "win32":
        return False
    return os.geteuid() == 0


@contextmanager
def _build_lock(progress: Progress) -> Iterator[None]:
    """Serialize builds on this machine (parallel test workers, two terminals).

    Without it, two processes that both find no base each spend a minute in
    debootstrap, and the second import re-points the tag under the first.
    Best effort: where the lock file cannot be opened, build unlocked.
    """
    if sys.platform == "win32":
        yield
        return
    import fcntl

    path = Path(tempfile.gettempdir()) / "sandbox-lab-images.lock"
    try:
        # O_NOFOLLOW: the file sits in a world-writable directory.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError:
        fd = -1
    if fd < 0:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("waiting for another sandbox-lab image build to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # also releases the lock


# --- docker plumbing ------------------------------------------------------------------


def _build(engine: DockerEngine, tag: str, source: object, *, hint: str = "", **options: object) -> ImageRef:
    """Build ``tag`` the way every build here is made; a failed build says what from, and its log's tail.

    Never reaches for a registry (``pull=False``): every base is local by
    construction. Intermediate containers go even when a step fails.
    """
    try:
        image = engine.build(tag, rm=True, forcerm=True, pull=False, **options)
    except BuildFailed as exc:
        raise ImageBuildError(
            f"Building {tag} from {source} failed: {exc.msg}\n{_build_log_tail(exc.build_log)}" + (f"\n{hint}" if hint else "")
        ) from exc
    return image


@contextmanager
def _worded(failure: type[BackendError], doing: str) -> Iterator[None]:
    """The engine's errors (the adapter's, mapped already) as the image step's own. Wrap only engine calls in it."""
    try:
        yield
    except Refused as exc:
        detail = exc.explanation or str(exc)
        raise failure(f"Docker failed while {doing}: {detail}") from exc
    except (EngineError, OSError) as exc:
        # the engine went away or never answered (the adapter's Unanswered); an OSError of the SDK's own
        # (reading the archive it sends) says the same
        raise DockerUnavailable(f"while {doing}: {_first_line(str(exc))}") from exc


def _build_log_tail(log: Optional[Iterable[object]], lines: int = 15) -> str:
    text = []
    for chunk in log or ():
        if isinstance(chunk, dict):
            piece = chunk.get("stream") or chunk.get("error") or ""
            if piece:
                text.append(str(piece))
    # The engine colours stderr with ANSI escapes; a report must not.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", "".join(text))
    tail = plain.rstrip().splitlines()[-lines:]
    return "\n".join(f"  | {line}" for line in tail)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        content = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join(f"  | {line}" for line in content[-lines:])


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no detail"
