"""Probe verdicts reused only while everything they depended on is unchanged (the doctor's re-run).

A probe that passed (an import, torch's CUDA facts, a JIT kernel) printed, with its result, every file its
process had loaded until then (``Evidence`` in ``doctor/probes/_probe_channel.py``: the file of every
module in ``sys.modules``, every file mapped into the process, the interpreter, the folders the import
system searched, the ``.pth`` files ``site`` read, the files Python code opened for reading, the folders it listed
and the paths it looked for and did not find; and, added here, what the loader searched for the libraries
it mapped: :meth:`VerdictCache._with_search_folders`) with its identity (device, inode, size, mtime_ns,
ctime_ns: the digest cache's key, ``wheelhouse.fileidentity.file_identity``). Its verdict is reused when

- the key matches: wh's version, the probe script's own bytes (and the channel it imports), the probe's
  argument, the interpreter (its path and file identity), the environment the probe is given (minus a few
  shell variables no import reads), the working folder the probe runs in where its PYTHONPATH or
  LD_LIBRARY_PATH has a relative or empty entry, and the GPU facts (names, compute
  capabilities, driver, CUDA);
- and every one of those files still has the identity it had, and every path that was absent still is; a
  folder whose entry names but ``__pycache__`` are the same, and byte code the probe's import wrote that holds
  the same bytes, count as unchanged (the doctor's own imports create those: :meth:`VerdictCache._same`).

Anything else re-executes it. Only passing verdicts are stored: a failure is executed every run, so a red
never outlives its cause. ``thorough`` reuses nothing and stores afresh: a verdict it executed and saw fail
is no longer stored. A reused verdict says so in the
evidence ("unchanged since <time>"), never that it executed.

What no probe can see is no evidence, and a change to it alone reuses the pass: what C code reads or looks for
(an extension module's init that ``fopen``s a data file beside it: no audit event, no mapping), and an existence test
that bypasses ``os.path`` (``os.stat``, ``os.access``, ``pathlib``'s ``exists``: the probe wraps ``os.path``'s
tests only, see ``_watch_existence_tests``). A changed file that a distribution's RECORD lists is reported by
``stack:files`` in the same run (a data file: a warning); the reuse does not wait for that check, which runs beside
the probes, so the warning, not the reused pass, is the run's word on it, and ``--thorough`` executes the import.

Where a verdict depends on files loaded before it in a shared worker process, that is part of its evidence:
one process's files are stored once, in the order printed (a *run*), and a verdict names how many of them
it depended on; the first changed file of a run invalidates every verdict from that point on.

Facts read from one file alone that cost a read of much of it (its fatbin images, the folders it searches) are
kept too, keyed by that file's identity (:meth:`VerdictCache.file_fact`). An ELF header and dynamic section
are not: since ``wheelhouse.elf`` reads them with a few ``pread`` calls, reading them again is cheaper than
storing them (the 71-wheel venv's re-run: 1.42-1.59 s with them stored, 1.25-1.36 s without).

The store is ``verdicts.json`` beside the stack check's digest cache (``install.digests.cache_path``): in
the site folder's ``.wh/`` where that is writable, else wh's user cache folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from wheelhouse import __version__
from wheelhouse.atomic import write_atomic
from wheelhouse.fileidentity import file_identity, identity_entry
from wheelhouse.install.digests import cache_path

from .loaderevidence import LOADER_STATE, NOT_ELF, elf_search_folders, links_digest, search_entry

__all__ = ["SCHEMA", "VerdictCache", "Reused", "probe_digest", "context_digest", "env_digest"]

SCHEMA = "wh-verdicts/1"
_NAME = "verdicts.json"
# Shell bookkeeping that no import reads and that differs between two shells of one user; and the doctor's own
# timing trace (read by wh, never by a probe: a traced run reuses what an untraced one executed).
_VOLATILE_ENV = frozenset({"WH_DOCTOR_TRACE", "_", "OLDPWD", "SHLVL", "COLUMNS", "LINES", "TERM", "COLORTERM", "NO_COLOR",
                           "FORCE_COLOR", "PS1", "PS2", "PROMPT_COMMAND", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY",
                           "WINDOWID", "HISTFILE", "HISTSIZE", "HISTCONTROL", "LS_COLORS"})


@dataclass(frozen=True)
class Reused:
    """A verdict taken from the cache: the probe's record, and when it was executed."""

    record: Mapping[str, Any]
    executed_at: float

    @property
    def since(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.executed_at))


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8", "surrogateescape")).hexdigest()


def probe_digest(script: str | os.PathLike) -> str:
    """The probe script's bytes and those of the channel every probe imports."""
    script = Path(script)
    h = hashlib.sha256()
    for f in (script, script.parent / "_probe_channel.py"):
        try:
            h.update(f.read_bytes())
        except OSError:
            h.update(b"-missing-" + str(f).encode())
    return h.hexdigest()


def env_digest(env: Mapping[str, str] | None) -> str:
    env = os.environ if env is None else env
    return _sha({k: v for k, v in env.items() if k not in _VOLATILE_ENV})


_CPUINFO = "/proc/cpuinfo"
_CPU_KEYS = ("model name", "flags", "features", "cpu model", "isa")  # x86, arm64, mips, riscv: what code may test


def cpu_facts(path: str | None = None) -> dict[str, str]:
    """The CPU's model and feature flags (the first processor's lines of /proc/cpuinfo): an import that picks a build
    by them (an AVX-512 kernel, faiss's variants) may pass on one host and fail on another sharing the venv."""
    out: dict[str, str] = {}
    try:
        with open(path or _CPUINFO, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    if out:
                        break  # the first processor's block is enough
                    continue
                key, sep, value = line.partition(":")
                key = key.strip().lower()
                if sep and key in _CPU_KEYS and key not in out:
                    out[key] = " ".join(sorted(value.split())) if key in ("flags", "features", "isa") else value.strip()
    except OSError:
        pass
    return out


def context_digest(python: str, gpu: Mapping[str, Any]) -> str:
    """wh's version, the interpreter (path and file identity), the GPU facts that stay put between runs, and the
    CPU (:func:`cpu_facts`: a venv on a shared file system is judged again on a host with other CPU features)."""
    try:
        ident: Any = file_identity(os.stat(os.path.realpath(python)))
    except OSError:
        ident = None
    stable = {"gpus": [{k: g.get(k) for k in ("index", "name", "compute_capability", "memory_total_mib")}
                       for g in gpu.get("gpus") or ()],
              **{k: gpu.get(k) for k in ("driver_version", "cuda_version", "source", "cuda_visible_devices")}}
    return _sha({"wh": __version__, "python": os.path.abspath(python), "identity": ident, "gpu": stable,
                 "machine": os.uname().machine, "cpu": cpu_facts()})


_SEARCH_PATHS = ("PYTHONPATH", "LD_LIBRARY_PATH")


def _working_folder(env: Mapping[str, str] | None) -> str | None:
    """The working folder where the probe's search paths resolve against it (an entry that is relative, or empty:
    the working folder itself), else None: a run from another folder reuses what passed."""
    env = os.environ if env is None else env
    if all(os.path.isabs(p) for var in _SEARCH_PATHS if env.get(var) for p in env[var].split(os.pathsep)):
        return None
    try:
        return os.getcwd()
    except OSError:  # removed under us: the probes' relative paths resolve nowhere
        return "(removed)"


def _names_now(folder: str) -> str | None:
    """``names_digest`` of ``doctor/probes/_probe_channel.py``: a folder's entry names but ``__pycache__`` and the
    doctor's own run folder (``wh-probe-code-*``, made under the temporary folder anew each run)."""
    try:
        names = sorted(n for n in os.listdir(folder) if n != "__pycache__" and not n.startswith("wh-probe-code-"))
    except OSError:
        return None
    return hashlib.blake2b("\0".join(names).encode("utf-8", "surrogateescape"), digest_size=32).hexdigest()


def _digest_now(path: str) -> str | None:
    """``_digest`` of ``doctor/probes/_probe_channel.py`` (BLAKE2b-256) of the file's bytes now."""
    try:
        return hashlib.blake2b(Path(path).read_bytes(), digest_size=32).hexdigest()
    except OSError:
        return None


class VerdictCache:
    """The reusable verdicts of one target's probes; thread-safe; saved once per doctor run."""

    def __init__(self, site: str | os.PathLike | None, context: str, *, thorough: bool = False,
                 environ: Mapping[str, str] | None = None) -> None:
        self.context = context
        self.thorough = thorough
        self.reused = 0  # verdicts taken from the cache this run
        self.stored = 0
        self._site = os.path.abspath(os.fspath(site)) if site else None
        self._environ = environ
        self._lock = threading.Lock()
        self._loaded = False
        self._runs: dict[str, dict[str, Any]] = {}  # run id -> {"files": [[path, *identity]]}
        self._verdicts: dict[str, dict[str, Any]] = {}  # key -> {"run", "upto", "record", "at", "context"}
        self._valid_upto: dict[str, int] = {}  # run id -> how many of its files are unchanged, this run
        self._stat: dict[str, list | None] = {}
        self._facts: dict[str, dict[str, list]] = {}  # kind -> {path: [*identity, value]}
        self._facts_used: dict[str, set[str]] = {}  # kind -> paths asked this run (the others are pruned)
        self._searched: dict[str, list] = {}  # path -> its _search_entry, once per run (every batch names them)
        self.changed: dict[str, dict[str, Any]] = {}  # run id -> its first changed file: why its verdicts re-ran
        self._dirty = False

    # ---- keys ------------------------------------------------------------------------------------------------

    def key(self, probe: str, arg: str, env: Mapping[str, str] | None) -> str:
        # The probes run in wh's working folder, against which a relative PYTHONPATH or LD_LIBRARY_PATH entry is
        # resolved (PWD in the environment says nothing where no shell set it).
        return _sha([self.context, probe, arg, env_digest(env), _working_folder(env)])

    # ---- reading ---------------------------------------------------------------------------------------------

    def _load(self) -> None:
        if self._loaded or self._site is None:
            self._loaded = True
            return
        self._loaded = True
        try:
            data = json.loads(cache_path(self._site, self._environ, _NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not (isinstance(data, dict) and data.get("schema") == SCHEMA and data.get("site") == self._site
                and isinstance(data.get("runs"), dict) and isinstance(data.get("verdicts"), dict)):
            return
        self._runs = {k: r for k, r in data["runs"].items() if isinstance(r, dict) and isinstance(r.get("files"), list)}
        self._facts = {k: {p: e for p, e in v.items() if isinstance(e, list) and len(e) == 6}
                       for k, v in (data.get("facts") or {}).items() if isinstance(v, dict)}
        self._verdicts = {k: v for k, v in data["verdicts"].items()
                          if isinstance(v, dict) and v.get("run") in self._runs and isinstance(v.get("upto"), int)
                          and isinstance(v.get("record"), dict) and isinstance(v.get("at"), (int, float))}

    def _now(self, path: str) -> list | None:
        """The identity of ``path`` now (as the probe printed it), memoised for this run."""
        if path not in self._stat:
            self._stat[path] = identity_entry(path)
        return self._stat[path]

    def _same(self, entry: list) -> bool:
        """Whether ``entry`` (as the probe printed it) still holds. Its identity unchanged, or, for an entry with
        a seventh element, what the import gets unchanged: a folder (``names:``) with the same entry names but
        ``__pycache__``, a folder the loader searches (``links:``) with the same names and link targets, byte code
        its probe wrote (``wrote:``) holding the same bytes. Such an entry is then
        rewritten with the identity now, so the next run finds it by ``stat`` alone."""
        now = self._now(entry[0])
        if len(entry) <= 6:
            return now == entry
        if now == entry[:6]:
            return True
        tag, _, digest = str(entry[6]).partition(":")
        if len(now) != 6 or len(entry) != 7 or not digest:
            return False
        if tag == "names":
            same = now[1:3] == entry[1:3] and _names_now(entry[0]) == digest  # the same folder, the same names
        elif tag == "links":
            same = now[1:3] == entry[1:3] and links_digest(entry[0]) == digest
        elif tag == "wrote":
            same = _digest_now(entry[0]) == digest
        else:
            same = False
        if same:
            entry[1:6] = now[1:6]
            self._dirty = True
        return same

    def _unchanged_upto(self, run_id: str) -> int:
        known = self._valid_upto.get(run_id)
        if known is not None:
            return known
        files = self._runs[run_id]["files"]
        n = 0
        for entry in files:
            if not (isinstance(entry, list) and entry and isinstance(entry[0], str)):
                break
            if not self._same(entry):
                self.changed[run_id] = {"path": entry[0], "was": entry[1:], "now": self._now(entry[0]), "at": n}
                break
            n += 1
        self._valid_upto[run_id] = n
        return n

    def lookup(self, probe: str, arg: str, env: Mapping[str, str] | None) -> Reused | None:
        """The stored verdict of ``probe`` on ``arg`` when nothing it depended on changed; else None. ``thorough``
        drops it: what this run does not store afresh (a failure it saw) is not reused by the next run."""
        key = self.key(probe, arg, env)
        with self._lock:
            self._load()
            v = self._verdicts.get(key)
            if v is None:
                return None
            if self.thorough:
                del self._verdicts[key]
                self._dirty = True
                return None
            if self._unchanged_upto(v["run"]) < v["upto"]:
                del self._verdicts[key]  # stale: it is executed again (and stored again if it passes)
                self._dirty = True
                return None
            self.reused += 1
            return Reused(v["record"], float(v["at"]))

    def file_fact(self, kind: str, path: str | os.PathLike, compute: Callable[[], Any]) -> Any:
        """``compute()`` (a JSON value read from file ``path`` alone, e.g. whether it exports ``PyInit_``), or the
        value stored for the same file identity (device, inode, size, mtime_ns, ctime_ns), as the digest cache
        keeps sha256s. What ``compute`` raises is raised and nothing is stored."""
        path = os.path.abspath(os.fspath(path))
        try:
            before = file_identity(os.stat(path))
        except OSError:
            return compute()
        with self._lock:
            self._load()
            self._facts_used.setdefault(kind, set()).add(path)
            known = self._facts.get(kind, {}).get(path)
        if known is not None and not self.thorough and tuple(known[:5]) == before:
            return known[5]
        value = compute()
        try:
            same = file_identity(os.stat(path)) == before  # not rewritten while it was read
        except OSError:
            same = False
        if same:
            with self._lock:
                self._facts.setdefault(kind, {})[path] = [*before, value]
                self._dirty = True
        return value

    # ---- writing ---------------------------------------------------------------------------------------------

    def store_run(self, probe: str, env: Mapping[str, str] | None, files: Sequence[Sequence[Any]],
                  verdicts: Sequence[tuple[str, Mapping[str, Any], int]]) -> None:
        """Keep the passing verdicts of one probe process: ``files`` in the order it printed them, and per
        verdict (its argument, its record, how many of ``files`` it depended on)."""
        if not verdicts or self._site is None:
            return
        clean = [list(f) for f in files if f and isinstance(f[0], str)]
        if len(clean) != len(files):
            return  # a file it could not name: nothing to key the verdicts by
        clean, at_count = self._with_search_folders(clean, env)
        verdicts = [(arg, record, at_count[int(upto)]) for arg, record, upto in verdicts]
        run_id = uuid.uuid4().hex[:16]
        at = time.time()
        with self._lock:
            self._load()
            self._runs[run_id] = {"files": clean}
            self._valid_upto[run_id] = len(clean)
            for arg, record, upto in verdicts:
                self._verdicts[self.key(probe, arg, env)] = {"run": run_id, "upto": int(upto), "record": dict(record),
                                                             "at": at, "context": self.context}
                self.stored += 1
            self._dirty = True

    def _with_search_folders(self, files: list[list], env: Mapping[str, str] | None) -> tuple[list[list], list[int]]:
        """``files`` with what decides which file the loader maps for a library name besides the mapped files
        themselves: its cache and preload list first, the folders of the probe's ``LD_LIBRARY_PATH``, and after
        each ELF object its RPATH/RUNPATH folders. A library of the same name appearing in a folder searched
        before the one it was found in is then a change. Returns them and, per count of ``files``, the count of
        the new list that covers as much."""
        env = os.environ if env is None else env
        seen: set[str] = set()  # a folder the probe named by its names is named again with its links
        # A relative entry is the working folder's, which is then part of the key: the same folder from here.
        ld_path = [os.path.abspath(p) for p in re.split("[:;]", env.get("LD_LIBRARY_PATH", "")) if p]
        out = [self._search_entry(p) for p in dict.fromkeys([*LOADER_STATE, *ld_path]) if p not in seen]
        seen.update(e[0] for e in out)
        at_count = [len(out)]
        for entry in files:
            out.append(entry)
            for folder in self._elf_search_folders(entry[0]) if len(entry) == 6 else ():
                if folder not in seen:
                    seen.add(folder)
                    out.append(self._search_entry(folder))
            at_count.append(len(out))
        return out, at_count

    def _search_entry(self, path: str) -> list:
        with self._lock:
            known = self._searched.get(path)
        if known is None:
            known = search_entry(path)
            with self._lock:
                self._searched[path] = known
        return list(known)

    def _elf_search_folders(self, path: str) -> list[str]:
        """:func:`~wheelhouse.doctor.loaderevidence.elf_search_folders` of ``path``, kept by the file's identity
        (:meth:`file_fact`)."""
        if path.endswith(NOT_ELF):
            return []
        folders = self.file_fact("search-folders", path, lambda: elf_search_folders(path))
        return [os.path.abspath(f) for f in folders if isinstance(f, str)] if isinstance(folders, list) else []

    def store_warning(self, probe: str, arg: str, env: Mapping[str, str] | None, files: Sequence[Sequence[Any]],
                      record: Mapping[str, Any]) -> None:
        """Keep one failed probe whose failure the caller judged a warning every cause of which the doctor's data
        names optional (never a fail): ``files`` is its process's evidence plus :func:`loader_witness` of what
        failed, so a change that could mend or alter the failure (the missing library appearing in a folder the
        loader searches, a new ``ld.so.cache``, the module's file replaced) executes it again. A reused one is
        judged again each run; one that would now be a fail is executed again by the caller."""
        if record.get("ok"):
            return
        self.store_run(probe, env, files, [(arg, record, len(files))])

    def forget(self, probe: str, arg: str, env: Mapping[str, str] | None) -> None:
        """Drop a stored verdict (it is executed again and stored afresh if it qualifies)."""
        with self._lock:
            self._load()
            if self._verdicts.pop(self.key(probe, arg, env), None) is not None:
                self._dirty = True

    def save(self) -> list[str]:
        """Write the store when it changed (best-effort: a store that cannot be written is a slower next run).

        Kept: this context's verdicts that were not found stale; runs no verdict names go."""
        with self._lock:
            if not self._dirty or self._site is None:
                return []
            verdicts = {k: v for k, v in self._verdicts.items() if v.get("context") == self.context}
            used = {v["run"] for v in verdicts.values()}
            # File facts: those asked this run, and every kind not asked this run kept whole (`--check`).
            facts = {k: {p: e for p, e in v.items() if p in self._facts_used[k]} if k in self._facts_used else v
                     for k, v in self._facts.items()}
            body = {"schema": SCHEMA, "site": self._site, "runs": {k: r for k, r in self._runs.items() if k in used},
                    "verdicts": verdicts, "facts": facts}
            self._dirty = False
        try:
            write_atomic(cache_path(self._site, self._environ, _NAME), json.dumps(body, separators=(",", ":")) + "\n")
        except OSError as exc:
            return [f"verdict cache of {self._site} not written: {exc.strerror or exc}"]
        return []
