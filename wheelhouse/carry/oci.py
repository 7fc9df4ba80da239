"""``wh push`` / ``wh pull``: a wheelhouse through an OCI registry, as one artifact (oci_layout).

push: every file is hashed and checked against the locks first (a broken wheelhouse is never
published), then each blob is asked for (HEAD) and uploaded only when the registry lacks it,
then the manifest is stored under the tag.

pull: the manifest is read and checked (oci_layout.parse_manifest); the locks and wh.json come
first, and every wheel the locks list must be a layer with the lock's sha256 and size before
any wheel is fetched. Each blob is streamed to a temp name beside its final one, hashed as it
comes, and renamed only when its digest (and so, for a wheel, the lock's sha256) matches. The
tree is assembled in ``.<out>.wh-pull`` beside ``-o``; an interrupted pull leaves it there, and
the next run keeps every file in it that still hashes to its layer's digest (and copies those
an earlier wheelhouse at ``-o`` already has), fetching only the rest. The finished tree
replaces ``-o`` whole (lock.output.swap_in): never a half-pulled wheelhouse under that name.
"""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import tempfile
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

from wheelhouse.errors import HashMismatch, UsageError, WhError
from wheelhouse.faults import checkpoint
from wheelhouse.progress import NullReporter, Reporter

from .oci_client import RegistryClient, connect_pool, need_oras
from .oci_layout import (
    EMPTY_BYTES,
    EMPTY_CONFIG,
    Blob,
    Layer,
    build_manifest,
    hash_file,
    parse_manifest,
    target_annotations,
    wheelhouse_files,
)
from .oci_ref import OciRef, parse_ref

__all__ = ["push", "pull", "push_wheelhouse", "pull_wheelhouse", "PushResult", "PullResult", "BlobReport",
           "BlobMismatch"]

_LOCKS = ("pylock.toml", "bootstrap/pylock.toml")
JOBS = 4  # blobs in flight at once: a registry answers each request in tens of ms; a few overlap that
_DIST_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar")
_FIRST = ("wh.json", *_LOCKS)  # small, and what every other blob is checked against


class BlobMismatch(HashMismatch):
    """A blob whose bytes do not hash to the digest the manifest (or the lock) promised."""

    code = "blob-mismatch"


@dataclass(frozen=True)
class BlobReport:
    path: str
    digest: str
    size: int
    moved: bool  # uploaded (push) / fetched (pull); False: skipped, already there

    def to_json(self, verb: str) -> dict[str, Any]:
        return {"path": self.path, "digest": self.digest, "size": self.size, verb: self.moved}


@dataclass(frozen=True)
class PushResult:
    ref: OciRef
    digest: str
    blobs: tuple[BlobReport, ...]
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def uploaded(self) -> list[BlobReport]:
        return [b for b in self.blobs if b.moved]

    @property
    def skipped(self) -> list[BlobReport]:
        return [b for b in self.blobs if not b.moved]

    def to_json(self) -> dict[str, Any]:
        return {"ref": str(self.ref), "digest": self.digest, "pinned": str(self.ref.with_digest(self.digest)),
                "uploaded": len(self.uploaded), "skipped": len(self.skipped),
                "bytes_uploaded": sum(b.size for b in self.uploaded),
                "blobs": [b.to_json("uploaded") for b in self.blobs], "requests": dict(self.requests)}


@dataclass(frozen=True)
class PullResult:
    ref: OciRef
    digest: str
    path: Path
    blobs: tuple[BlobReport, ...]
    annotations: dict[str, str] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def fetched(self) -> list[BlobReport]:
        return [b for b in self.blobs if b.moved]

    @property
    def reused(self) -> list[BlobReport]:
        return [b for b in self.blobs if not b.moved]

    def to_json(self) -> dict[str, Any]:
        return {"ref": str(self.ref), "digest": self.digest, "out": str(self.path),
                "fetched": len(self.fetched), "reused": len(self.reused),
                "bytes_fetched": sum(b.size for b in self.fetched), "annotations": self.annotations,
                "blobs": [b.to_json("fetched") for b in self.blobs], "requests": dict(self.requests)}


# --- push ----------------------------------------------------------------------------------------

def _as_ref(ref: OciRef | str) -> OciRef:
    return ref if isinstance(ref, OciRef) else parse_ref(ref)


T = TypeVar("T")


class _Stopped(Exception):
    """Another worker failed, or the user interrupted: a transfer in flight gives up."""


def _in_parallel(clients: list[RegistryClient], items: Iterable[T],
                 work: Callable[[RegistryClient, T, threading.Event], None]) -> None:
    """``work(client, item, stop)`` for every item, each worker thread with a client of its own. On the
    first failure (or Ctrl-C) ``stop`` is set: work not started is dropped, downloads in flight give up
    at their next chunk; the failure is raised once every worker has ended."""
    items = list(items)
    stop = threading.Event()
    if len(clients) == 1 or len(items) <= 1:
        for item in items:
            work(clients[0], item, stop)
        return
    free = list(clients)
    lock = threading.Lock()

    def run(item: T) -> None:
        if stop.is_set():
            raise _Stopped()
        with lock:
            client = free.pop()
        try:
            work(client, item, stop)
        finally:
            with lock:
                free.append(client)

    with ThreadPoolExecutor(max_workers=len(clients), thread_name_prefix="wh-oci") as pool:
        futures = [pool.submit(run, item) for item in items]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            stop.set()  # no-op when all went well; otherwise the workers wind down
            for f in futures:
                f.cancel()
            wait(futures)
    errors = [f.exception() for f in futures if not f.cancelled() and f.exception() is not None]
    real = [e for e in errors if not isinstance(e, _Stopped)]
    if real or errors:
        raise (real or errors)[0]


def _requests(clients: list[RegistryClient]) -> dict[str, int]:
    total: collections.Counter[str] = collections.Counter()
    for c in clients:
        total.update(c.requests)
    return dict(total)


def _check_locks(root: Path, blobs: dict[str, Blob]) -> None:
    """Every wheel each lock lists is a file of the wheelhouse with the lock's sha256 and size."""
    from wheelhouse.lock import read_pylock

    bad: list[tuple[str, str, str]] = []
    for lock_path in _LOCKS:
        if lock_path not in blobs:
            continue
        folder = Path(lock_path).parent.as_posix()
        for f in read_pylock(root / folder).files:
            if not f.path:
                continue
            rel = f.path if folder == "." else f"{folder}/{f.path}"
            blob = blobs.get(rel)
            if blob is None:
                raise UsageError(f"{root}: {lock_path} lists {rel}, which is not in the wheelhouse",
                                 hint=f"run `wh verify {root}`, or stage it again")
            if blob.digest != f"sha256:{f.sha256}" or (f.size is not None and f.size != blob.size):
                bad.append((rel, f.sha256, blob.digest.split(":", 1)[1]))
    if bad:
        rel, expected, actual = bad[0]
        raise HashMismatch(rel, expected, actual, more=bad[1:],
                           message=f"{root / rel}: sha256 is {actual}, {Path(rel).parts[0]} lock says {expected}"
                                   + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "") + "; nothing was pushed",
                           hint=f"run `wh verify {root}`, or stage the wheelhouse again")


def _hash_all(root: Path, files: Sequence[str], reporter: Reporter) -> list[Blob]:
    total = sum((root / f).stat().st_size for f in files)
    reporter.start("hash", total=total, unit="B")
    blobs = []
    for rel in files:
        blob = hash_file(root, rel)
        blobs.append(blob)
        reporter.advance("hash", blob.size)
    reporter.finish("hash")
    return blobs


def push_wheelhouse(wheelhouse: str | Path, ref: OciRef | str, *, insecure: bool = False,
                    reporter: Reporter | None = None, jobs: int = JOBS) -> PushResult:
    """Publish the wheelhouse at ``wheelhouse`` as one artifact tagged ``ref``; blobs the registry has
    are not uploaded again."""
    reporter = reporter or NullReporter()
    ref = _as_ref(ref)
    if ref.digest:
        raise UsageError(f"{ref}: push to a tag, not a digest (the digest is what the push makes)",
                         hint=f"e.g. wh push WH oci://{ref.host}/{ref.repository}:v1")
    root = Path(wheelhouse)
    from wheelhouse.lock.output import read_meta
    from wheelhouse.lock.writer import owned_paths

    meta = read_meta(root)
    if meta is None:
        raise UsageError(f"{root} is not a wheelhouse (no wh.json written by wh)",
                         hint="give the folder of a `wh stage -o DIR`")
    need_oras("wh push")
    files = wheelhouse_files(root, owned_paths(meta))
    blobs = _hash_all(root, files, reporter)
    by_path = {b.path: b for b in blobs}
    if "pylock.toml" not in by_path:
        raise UsageError(f"{root} has no pylock.toml", hint="stage the wheelhouse again")
    _check_locks(root, by_path)
    from wheelhouse.lock import read_pylock

    wheels = len([f for f in read_pylock(root).files if f.path])
    body = build_manifest(blobs, target_annotations(meta, wheels, sum(b.size for b in blobs)))

    clients = connect_pool(ref, min(jobs, len(blobs)) or 1, insecure=insecure, command="wh push")
    reports = _upload_all(clients, root, blobs, reporter)
    digest = clients[0].put_manifest(body, ref.tag or "latest")
    return PushResult(ref, digest, tuple(reports), _requests(clients))


def _upload_all(clients: list[RegistryClient], root: Path, blobs: list[Blob], reporter: Reporter) -> list[BlobReport]:
    """HEAD each distinct blob, upload those the repository lacks; the empty config last."""
    reporter.start("upload", total=sum(b.size for b in blobs), unit="B")
    first: dict[str, Blob] = {}
    for b in blobs:  # one blob, many paths: asked for and uploaded once
        first.setdefault(b.digest, b)
    uploaded: set[str] = set()
    lock = threading.Lock()

    def one(client: RegistryClient, b: Blob, stop: threading.Event) -> None:
        if not client.exists(b.digest):
            client.upload(root / b.path, b.digest, b.size)
            with lock:
                uploaded.add(b.digest)
            checkpoint("oci.push.uploaded")
        reporter.advance("upload", b.size)

    _in_parallel(clients, first.values(), one)
    client = clients[0]
    if not client.exists(EMPTY_CONFIG["digest"]):
        with tempfile.TemporaryDirectory(prefix="wh-push-") as tmp:
            Path(tmp, "config").write_bytes(EMPTY_BYTES)
            client.upload(Path(tmp, "config"), EMPTY_CONFIG["digest"], EMPTY_CONFIG["size"])
    reports = [BlobReport(b.path, b.digest, b.size, b.digest in uploaded and first[b.digest] is b) for b in blobs]
    n = sum(r.moved for r in reports)
    reporter.finish("upload", f"uploaded {n} of {len(reports)} blobs "
                              f"({sum(r.size for r in reports if r.moved) / 1e6:.1f} MB); "
                              f"{len(reports) - n} already in the registry")
    return reports


def push(wheelhouse: str | Path, ref: str, reporter: Reporter | None = None, **kw) -> PushResult:
    """Publish a wheelhouse: see ``push_wheelhouse``."""
    return push_wheelhouse(wheelhouse, ref, reporter=reporter, **kw)


# --- pull ----------------------------------------------------------------------------------------

def _partial_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.wh-pull"


def _file_digest(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
        return "sha256:" + h.hexdigest()
    except OSError:
        return None


def _prune(partial: Path, keep: set[str]) -> None:
    """Remove from the partial tree what the manifest does not name (temp files of a killed run,
    files of another artifact), so the tree that is swapped in is exactly the artifact."""
    for p in sorted(partial.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        rel = p.relative_to(partial).as_posix()
        if p.is_symlink() or p.is_file():
            if rel not in keep:
                p.unlink()
        elif p.is_dir() and not any(k.startswith(rel + "/") for k in keep):
            shutil.rmtree(p, ignore_errors=True)


def _fetch(client: RegistryClient, layer: Layer, dest: Path, reporter: Reporter,
           stop: threading.Event | None = None) -> None:
    """Stream one blob to a temp name beside ``dest``; rename only once it hashes to its digest."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        h = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as fh, client.open_blob(layer.digest, layer.path) as chunks:
            for chunk in chunks:
                if stop is not None and stop.is_set():
                    raise _Stopped()
                size += len(chunk)
                if size > layer.size:
                    break  # a registry sending more than the manifest says: stop reading
                h.update(chunk)
                fh.write(chunk)
                reporter.advance("pull", len(chunk))
            fh.flush()
            os.fsync(fh.fileno())
        actual = "sha256:" + h.hexdigest()
        if size != layer.size or actual != layer.digest:
            got = f"{size} bytes" if size != layer.size else actual
            raise BlobMismatch(layer.path, layer.digest, actual,
                               message=f"{layer.path}: the registry sent {got} for blob {layer.digest} "
                                       f"({layer.size} bytes); refused, nothing was named",
                               hint=f"the registry's copy of {layer.path} is damaged: push the wheelhouse again "
                                    "(`wh push WH REF`), then pull")
        os.chmod(tmp, 0o755 if layer.executable else 0o644)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _reuse(layer: Layer, dest: Path, old: Path | None) -> bool:
    """True when ``dest`` already holds the blob (a killed pull verified it), or the wheelhouse at
    ``-o`` has it (an update fetches only what changed): checked by hashing, never trusted."""
    if dest.is_file() and not dest.is_symlink():
        if _file_digest(dest) == layer.digest:
            return True
        dest.unlink()
    if old is not None:
        src = old / layer.path
        if src.is_file() and not src.is_symlink() and src.stat().st_size == layer.size \
                and _file_digest(src) == layer.digest:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
            os.close(fd)
            shutil.copyfile(src, tmp)
            os.chmod(tmp, 0o755 if layer.executable else 0o644)
            if _file_digest(Path(tmp)) != layer.digest:  # changed while copied
                os.unlink(tmp)
                return False
            os.replace(tmp, dest)
            return True
    return False


def _check_against_locks(partial: Path, by_path: dict[str, Layer], where: str) -> None:
    """Before any wheel is fetched: each wheel a lock lists is a layer with the lock's sha256 and size."""
    from wheelhouse.lock import read_pylock

    if "bootstrap/pylock.toml" not in by_path:  # staged --no-bootstrap: nothing there is vouched for
        stray = sorted(p for p in by_path if p.startswith("bootstrap/") and p.lower().endswith(_DIST_SUFFIXES))
        if stray:
            raise WhError(f"{where}: {stray[0]} is in bootstrap/, which has no bootstrap/pylock.toml, yet the "
                          "bootstrap command (pip --find-links bootstrap/) may install it; refused before fetching it",
                          hint="push a wheelhouse that `wh verify` passes, then pull")
    for lock_path in _LOCKS:
        if lock_path not in by_path:
            continue
        folder = Path(lock_path).parent.as_posix()
        files = read_pylock(partial / folder).files
        if folder == "bootstrap":  # `pip install --find-links bootstrap/ wh` would take any distribution there
            listed = {f"bootstrap/{f.path}" for f in files}
            stray = sorted(p for p in by_path if p.startswith("bootstrap/") and p.count("/") == 1
                           and p.lower().endswith(_DIST_SUFFIXES) and p not in listed)
            if stray:
                raise WhError(f"{where}: {stray[0]} is not in bootstrap/pylock.toml, yet the bootstrap command "
                              "(pip --find-links bootstrap/) may install it; refused before fetching it",
                              hint="push a wheelhouse that `wh verify` passes, then pull")
        for f in files:
            if not f.path:
                continue
            rel = f.path if folder == "." else f"{folder}/{f.path}"
            layer = by_path.get(rel)
            if layer is None:
                raise WhError(f"{where}: {lock_path} lists {rel}, but the artifact has no such layer",
                              hint="push the wheelhouse again (`wh push WH REF`), then pull")
            if layer.sha256 != f.sha256 or (f.size is not None and f.size != layer.size):
                raise BlobMismatch(rel, f.sha256, layer.sha256,
                                   message=f"{where}: {rel} is blob {layer.digest} in the manifest, but {lock_path} "
                                           f"says sha256:{f.sha256}; refused before fetching it",
                                   hint="the artifact does not match its own lock: push the wheelhouse again")


def _place_all(clients: list[RegistryClient], layers: Sequence[Layer], partial: Path, old: Path | None,
               reports: dict[str, BlobReport], counter: list[int], reporter: Reporter) -> None:
    """Each layer under ``partial``: kept or copied when it already hashes right, else fetched."""
    lock = threading.Lock()

    def one(client: RegistryClient, layer: Layer, stop: threading.Event) -> None:
        dest = partial / layer.path
        if _reuse(layer, dest, old):
            reports[layer.path] = BlobReport(layer.path, layer.digest, layer.size, False)
            reporter.advance("pull", layer.size)
            return
        _fetch(client, layer, dest, reporter, stop)
        reports[layer.path] = BlobReport(layer.path, layer.digest, layer.size, True)
        with lock:
            counter[0] += 1
            named = counter[0]
        checkpoint(f"oci.pull.named.{named}")

    _in_parallel(clients, layers, one)


def pull_wheelhouse(ref: OciRef | str, out: str | Path, *, insecure: bool = False,
                    reporter: Reporter | None = None, jobs: int = JOBS) -> PullResult:
    """Fetch the wheelhouse ``ref`` into ``out``, every blob verified before it is named."""
    from wheelhouse.lock.output import check_output, hold_output, read_meta, real_output, swap_in

    reporter = reporter or NullReporter()
    ref = _as_ref(ref)
    out = real_output(Path(out))
    check_output(out)
    need_oras("wh pull")
    with hold_output(out, what="wh pull", on_wait=reporter.note) as notes:
        for note in notes:
            reporter.note(note)
        clients = connect_pool(ref, max(1, jobs), insecure=insecure, command="wh pull")
        body, digest = clients[0].get_manifest()
        layers, annotations = parse_manifest(body, str(ref))
        by_path = {layer.path: layer for layer in layers}
        partial = _partial_dir(out)
        partial.mkdir(exist_ok=True)
        _prune(partial, set(by_path))
        old = out if read_meta(out) is not None else None
        first = [by_path[p] for p in _FIRST if p in by_path]
        rest = [x for x in layers if x.path not in _FIRST]
        reporter.start("pull", total=sum(x.size for x in layers), unit="B")
        reports: dict[str, BlobReport] = {}
        counter = [0]
        _place_all(clients[:1], first, partial, old, reports, counter, reporter)
        _check_against_locks(partial, by_path, str(ref))
        _place_all(clients, rest, partial, old, reports, counter, reporter)
        reporter.finish("pull", f"fetched {counter[0]} of {len(layers)} blobs; "
                                f"{len(layers) - counter[0]} already here, verified")
        swap_in(partial, out)
    blobs = tuple(reports[x.path] for x in layers)
    return PullResult(ref, digest, out, blobs, annotations, _requests(clients))


def pull(ref: str, out: Path, reporter: Reporter | None = None) -> Path:
    """Fetch the wheelhouse ``ref`` (``oci://HOST/REPO:TAG``) into ``out``, every blob verified by its
    digest and every wheel by the lock's sha256 before it is named; returns the wheelhouse folder.

    The door ``wheelhouse.carry.materialize`` uses for ``wh install oci://...``.
    """
    return pull_wheelhouse(ref, out, reporter=reporter).path
