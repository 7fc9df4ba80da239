"""What every probe in this folder shares: stay off ``sys.path``, print marker records.

Stdlib only. ``python probe.py`` puts this folder first on ``sys.path``, which
is how a probe finds this module; importing it takes the folder off again, so
no probe file (``imports.py``, ``libcuda.py``...) can shadow an installed
module that a probe or the code it tests imports. A probe prints one JSON
record per line after :data:`MARKER` (``wheelhouse.probes.MARKER``), so stray
output of the code under test cannot break parsing.
"""

import json
import os
import stat
import sys
import traceback

__all__ = ["MARKER", "CODE_CACHE_ENV", "emit", "error_record", "Evidence", "names_digest", "written_files"]

MARKER = "@@WH-PROBE@@"

def _die_with_the_doctor():
    """Linux: SIGKILL this probe when the doctor that started it dies (killed outright, it cannot kill us).

    The doctor starts each probe in a session of its own (so a timeout kills the probe's whole group), which
    also means nothing else stops it when the doctor is gone: a hanging import would run forever.
    """
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError, ValueError):
        return
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(70)


if sys.platform.startswith("linux"):
    _die_with_the_doctor()

# Byte code this process's imports wrote and no record has named yet: path -> the bytes written (the code the
# import then ran); taken out when a record names the file.
_WROTE = {}


try:  # bound once, here: _digest runs inside the imports under test, which must not see it import anything
    from _blake2 import blake2b as _blake2b
except ImportError:
    from hashlib import blake2b as _blake2b


def _digest(data):
    """BLAKE2b-256 of ``data`` (hex): ``_blake2`` is built into CPython, where hashlib's sha256 would load OpenSSL into
    the process under test (which could change which libcrypto a package's import binds to); 3x the speed of the
    built-in sha256. ``wheelhouse.doctor.verdicts`` computes the same with ``hashlib.blake2b``."""
    return _blake2b(bytes(data), digest_size=32).hexdigest()


def _watch_byte_code_writes():
    """Keep what the import system writes as byte code (SourceLoader compiles a source whose .pyc is absent or
    stale, then writes it). Another probe process compiling the same source at the same time writes the file
    again: the evidence names the digest of these bytes, so the same bytes written over them are no change."""
    try:
        from importlib.machinery import SourceFileLoader
        original = SourceFileLoader._cache_bytecode
    except (ImportError, AttributeError):
        return

    def _cache_bytecode(self, source_path, bytecode_path, data):
        try:
            _WROTE[os.path.abspath(bytecode_path)] = bytes(data)
        except Exception:  # noqa: BLE001 - not kept: the file is evidence by its identity alone
            pass
        return original(self, source_path, bytecode_path, data)

    SourceFileLoader._cache_bytecode = _cache_bytecode


_watch_byte_code_writes()

# The files the import system read a module's code from (its source and byte code path, or its sourceless .pyc),
# in order, not yet named by a record.
_CODE_READ = []


def _watch_code_reads():
    """Note the file of every module the import system loads from Python code, whatever becomes of the module
    object: one whose place in sys.modules a forwarding object takes (a deprecation shim) leaves no ``__file__``
    to name, yet the next import runs that file again."""
    try:
        from importlib.machinery import SourceFileLoader, SourcelessFileLoader
        from importlib.util import cache_from_source
    except ImportError:
        return

    def watched(original, with_byte_code):
        def get_code(self, fullname):
            try:
                path = self.get_filename(fullname)
                _CODE_READ.append(path)
                if with_byte_code:
                    _CODE_READ.append(cache_from_source(path))
            except Exception:  # noqa: BLE001 - nothing to note: the module's __file__ is evidence where it has one
                pass
            return original(self, fullname)
        return get_code

    SourceFileLoader.get_code = watched(SourceFileLoader.get_code, True)
    SourcelessFileLoader.get_code = watched(SourcelessFileLoader.get_code, False)


_watch_code_reads()

# What Python code in this process read, listed or looked for, not yet named by a record: the files it opened for
# reading (a config, a table, a data file read at import), the folders it listed (a plugin folder a glob walks), the
# paths it looked for and did not find (a failed open, an optional config os.path.exists did not find). And every file
# this process opened for writing (never evidence: it writes them itself, before or after a read).
_OPENED = []
_LISTED = []
_ABSENT = []
_WRITTEN = set()
# The import system's byte code folder: never imported from, and written by the first run (a walk of a package lists
# it; a folder's names leave it out).
_BYTE_CODE_FOLDER = "__pycache__"


def written_files():
    """Every file this process opened for writing so far (sorted): none of them is evidence of a verdict."""
    return sorted(_WRITTEN)


def _doctor_paths():
    """Path prefixes that are never evidence: pseudo-files (/proc, /sys, /dev) and the doctor's own files (these
    probes, the run's private code cache: new every run)."""
    return ("/proc/", "/sys/", "/dev/", os.path.join(os.path.dirname(os.path.realpath(__file__)), ""),
            *((os.path.join(os.path.abspath(_code_folder), ""),) if _code_folder else ()))


def _watch_file_access():
    """Note what Python code does with files in this process, from audit events (PEP 578): what an import reads,
    lists or looks for is evidence as much as its code.

    - ``open`` (``open()``, ``os.open``, ``io.open_code``): a regular file opened for reading. A package whose
      ``__init__`` does ``json.load(open(config))`` fails once that file is corrupted. The event comes before the
      open: a path not there is noted as absent (an optional config tried with ``open``; it appearing is a change).
    - ``os.listdir``, ``os.scandir`` (what ``glob``, ``os.walk`` and ``pathlib``'s ``iterdir``/``glob`` call, in
      3.8 to 3.13): the folder, named by its entry names as the import system's folders are. A package that loads
      every ``plugins/*.py`` fails on a broken new plugin; neither its folder nor any file it loaded changed.
      ``__pycache__`` is left out (the first run writes it).

    Not noted: what this process opened for writing (an output, or a cache its first import writes and then reads
    back: its name may be new every run), nor :func:`_doctor_paths`. The hook runs for every audit event of the
    process (``import``, ``compile``, ``sys._getframe``, ctypes' calls...): one set lookup rejects the others."""
    skip = _doctor_paths()
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    stat_of, is_file, abspath, fsdecode, readlink = os.stat, stat.S_ISREG, os.path.abspath, os.fsdecode, os.readlink
    sep, byte_code = os.sep, os.sep + _BYTE_CODE_FOLDER
    note, listed, absent, written = _OPENED.append, _LISTED.append, _ABSENT.append, _WRITTEN
    watched = frozenset(("open", "os.listdir", "os.scandir"))  # the listing events' argument: the folder (or an fd)

    def hook(event, args):
        if event not in watched:
            return
        try:
            path = args[0]
            if isinstance(path, bytes):
                path = fsdecode(path)
            elif path is None:  # os.listdir() lists the working folder
                path = "."
            elif isinstance(path, int) and event != "open":  # os.scandir(fd), os.listdir(fd): the folder it is
                path = readlink("/proc/self/fd/%d" % path)
            if not isinstance(path, str):
                return  # a file descriptor
            path = abspath(path)
            if event != "open":
                if not (path + sep).startswith(skip) and not path.endswith(byte_code):
                    listed(path)
                return
            _, mode, flags = args
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                    (isinstance(flags, int) and flags & writing):
                written.add(path)
            elif path not in written and not path.startswith(skip):
                try:
                    if is_file(stat_of(path).st_mode):
                        note(path)
                except (FileNotFoundError, NotADirectoryError):
                    absent(path)
        except Exception:  # noqa: BLE001 - an audit hook must never break the code it watches
            pass

    try:
        sys.addaudithook(hook)
    except Exception:  # noqa: BLE001 - no hook (an embedding that forbids it): module and mapped files only
        pass


def _watch_existence_tests():
    """Note each path that ``os.path.exists``, ``lexists``, ``isfile``, ``isdir`` or ``islink``, or ``pathlib.Path``'s
    ``exists``, ``is_file``, ``is_dir`` or ``is_symlink`` answered False for, and each that ``os.path.getsize`` and
    kin raised OSError for: an ``__init__`` that reads an optional config only ``if os.path.exists(conf)`` opens
    nothing while there is none, and no audit event tells of a ``stat``. Such a path is named as absent (it appearing
    is a change), where it is still absent when named: one the process created meanwhile (``if not exists(d):
    os.makedirs(d)``) is its own, as is a file ``islink`` said False of. A False costs a path's ``abspath``; a True,
    one call more. ``os.stat`` and ``os.access`` themselves are not watched: they are members of
    ``os.supports_follow_symlinks`` and its kin, which ``shutil`` tests by identity (a wrapper would change how
    ``rmtree`` deletes)."""
    skip = _doctor_paths()
    fspath, fsdecode, abspath, absent = os.fspath, os.fsdecode, os.path.abspath, _ABSENT.append

    def watched(original):
        def test(*args, **kwargs):  # os.path.isdir(s=...) is a call too
            found = original(*args, **kwargs)
            if not found:
                note(args[0] if args else next(iter(kwargs.values()), None))
            return found
        return test

    def raising(original):  # getsize and kin: an OSError where the path is not there
        def test(*args, **kwargs):
            try:
                return original(*args, **kwargs)
            except OSError:
                note(args[0] if args else next(iter(kwargs.values()), None))
                raise
        return test

    def note(path):
        try:
            name = fspath(path)
            if isinstance(name, bytes):
                name = fsdecode(name)
            if isinstance(name, str):  # not a file descriptor
                name = abspath(name)
                if not name.startswith(skip):
                    absent(name)
        except Exception:  # noqa: BLE001 - the answer is given whatever its path is
            pass

    for names, wrap in ((("exists", "lexists", "isfile", "isdir", "islink"), watched),
                        (("getsize", "getmtime", "getctime", "getatime"), raising)):
        for name in names:
            original = getattr(os.path, name, None)
            if original is None:
                continue
            test = wrap(original)
            for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
                setattr(test, attr, getattr(original, attr, None))
            test.__wrapped__ = original
            home = sys.modules.get(getattr(original, "__module__", None) or "")
            for module in {id(m): m for m in (os.path, home) if m is not None}.values():
                if getattr(module, name, None) is original:  # genericpath's too: pickle finds it there by name
                    setattr(module, name, test)
    # pathlib's tests call os.stat, which is not wrapped: its own methods are (``Path(conf).exists()`` is the idiom),
    # in every pathlib module this process loads (the imports probe forgets its own modules: the code under test
    # imports pathlib afresh), as it is loaded.
    def patch_pathlib(pathlib):
        path_class = getattr(pathlib, "Path", None)
        for name in ("exists", "is_file", "is_dir", "is_symlink"):
            # Set on Path itself whichever class of its MRO defines it (3.13: pathlib._abc.PathBase).
            original = getattr(path_class, name, None)
            if original is None or getattr(original, "_wh_watched", False):
                continue

            def method(self, *args, _original=original, **kwargs):
                found = _original(self, *args, **kwargs)
                if not found:
                    note(self)
                return found

            method.__name__, method.__qualname__ = original.__name__, original.__qualname__
            method.__doc__, method.__wrapped__, method._wh_watched = original.__doc__, original, True
            setattr(path_class, name, method)

    class PathlibWatch:
        """A meta path finder that only hands on pathlib's spec, its loader patching the module once executed."""

        def find_spec(self, name, path=None, target=None):
            if name != "pathlib":
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    run = spec.loader.exec_module

                    def exec_module(module, _run=run):
                        _run(module)
                        patch_pathlib(module)

                    spec.loader.exec_module = exec_module
                    return spec
                if spec is not None:
                    return spec
            return None

    if "pathlib" in sys.modules:
        patch_pathlib(sys.modules["pathlib"])
    sys.meta_path.insert(0, PathlibWatch())


CODE_CACHE_ENV = "WH_PROBE_CODE_CACHE"


def _share_compiled_code(folder):
    """Where the import system writes no byte code (PYTHONDONTWRITEBYTECODE, ``-B``), every probe process compiled
    every source it imported again: numpy's, once per batch that imports numpy (on the 71-wheel bench venv 2170 of
    4520 compiles, 5.0 s of CPU). The doctor gives its probes one private folder for the run (:data:`CODE_CACHE_ENV`):
    the code ``compile`` makes of a source is kept there, keyed by everything it depends on (the source's bytes, its
    path, the optimisation level, this interpreter's magic number and version), and a probe that finds it loads it
    with marshal, as an import loads a ``.pyc``. The code is the same; what an import reads from the target (its
    source, its ``__pycache__``) is not changed, nor is anything written into the target."""
    try:
        import marshal
        from importlib.machinery import SourceFileLoader
        from importlib.util import MAGIC_NUMBER
        original = SourceFileLoader.source_to_code
    except (ImportError, AttributeError):
        return
    salt = MAGIC_NUMBER + sys.version.encode() + b"\0"

    def source_to_code(self, data, path, *, _optimize=-1):
        try:
            level = sys.flags.optimize if _optimize == -1 else _optimize
            kept = os.path.join(folder, _digest(b"\0".join([salt, str(level).encode(), os.fsencode(path), bytes(data)])))
        except Exception:  # noqa: BLE001 - a str source, an odd path: compiled as the loader would
            return original(self, data, path, _optimize=_optimize)
        try:
            with open(kept, "rb") as fh:
                return marshal.loads(fh.read())
        except (OSError, ValueError, EOFError, TypeError):
            pass
        code = original(self, data, path, _optimize=_optimize)
        try:
            part = "%s.%d" % (kept, os.getpid())
            with open(part, "wb") as fh:
                fh.write(marshal.dumps(code))
            os.replace(part, kept)
        except (OSError, ValueError):
            pass
        return code

    SourceFileLoader.source_to_code = source_to_code


_COMPILE_WAIT = 20.0


def _one_compile_at_a_time(folder):
    """Where the import system writes byte code, probes importing the same source at once (the box's first run:
    every torch family batch, the JIT probe and torch_info start together) each compiled it and wrote its own
    ``.pyc`` over the others' (marshal's bytes differ between processes): a verdict then named bytes no longer
    there and was executed again on the next run (63 imports of the 71-wheel venv with 8 jobs). A lock per source
    in the run's private folder, held while a probe reads or compiles and writes that source's byte code (no module
    code runs meanwhile), makes the second probe read what the first wrote."""
    try:
        import fcntl
        from importlib.machinery import SourceFileLoader
    except ImportError:
        return
    import time

    original = SourceFileLoader.get_code
    flock, unlock, exclusive = fcntl.flock, fcntl.LOCK_UN, fcntl.LOCK_EX | fcntl.LOCK_NB
    flags = os.O_CREAT | os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    sleep, clock = time.sleep, time.monotonic

    def lock(fd):
        """Wait for the lock, at most _COMPILE_WAIT seconds (a loader that imports while it compiles could otherwise
        wait for a probe that waits for it); then compile without it, as before."""
        until = clock() + _COMPILE_WAIT
        while True:
            try:
                flock(fd, exclusive)
                return
            except BlockingIOError:
                if clock() > until:
                    return
                sleep(0.002)

    def get_code(self, fullname):
        try:
            fd = os.open(os.path.join(folder, _digest(os.fsencode(self.get_filename(fullname))) + ".lock"), flags, 0o600)
        except Exception:  # noqa: BLE001 - no lock: compiled as before
            return original(self, fullname)
        try:
            lock(fd)
            return original(self, fullname)
        finally:
            try:
                flock(fd, unlock)
            finally:
                os.close(fd)

    SourceFileLoader.get_code = get_code


_code_folder = os.environ.pop(CODE_CACHE_ENV, None)  # the code under test never sees it
_watch_file_access()
_watch_existence_tests()
if sys.dont_write_bytecode and _code_folder and os.path.isdir(_code_folder):
    _share_compiled_code(_code_folder)
elif _code_folder and os.path.isdir(_code_folder):
    _one_compile_at_a_time(_code_folder)

_HERE = os.path.dirname(os.path.realpath(__file__))
while sys.path and os.path.realpath(sys.path[0] or os.curdir) == _HERE:
    del sys.path[0]  # never let a probe file shadow an installed module


def emit(obj, stream=None):
    """Print one marker record on ``stream`` (default: the current ``sys.stdout``)."""
    out = sys.stdout if stream is None else stream
    out.write("\n" + MARKER + " " + json.dumps(obj) + "\n")
    out.flush()


def error_record(exc):
    """The failure record of a probe whose code under test raised ``exc`` (call it in the ``except``)."""
    return {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc),
            "traceback": "".join(traceback.format_exc().splitlines(True)[-12:])}


# Mappings that name no file the probe loaded: shared anonymous memory shows as "/dev/zero (deleted)" (the CUDA
# driver maps it in every process that touches a GPU), memfd and SysV segments likewise. As evidence they would
# read as a replaced file and keep every GPU probe's pass from ever being reused.
_NOT_FILES = ("/dev/", "/memfd:", "/SYSV", "/anon_hugepage", "/drm mm object")
_FILES_UNDER_DEV = "/dev/shm/"


def _maps_a_file(path):
    """Whether a mapping's path names a file the probe loaded. /dev/shm is a tmpfs of real files: a shared object
    unpacked there is one (its semaphores and POSIX shared memory, named otherwise, are not)."""
    if not path.startswith("/"):
        return False
    if path.startswith(_FILES_UNDER_DEV):
        return ".so" in os.path.basename(path)
    return not path.startswith(_NOT_FILES)


# The doctor's own private folder of a run, made in the temporary folder under a new name each run
# (``wheelhouse.doctor.probes``): an import that lists the temporary folder must not see a change in it.
_DOCTOR_FOLDER_PREFIX = "wh-probe-code-"


def names_digest(names):
    """The digest of a folder's entry names, ``__pycache__`` and the doctor's own run folder left out
    (``wheelhouse.doctor.verdicts`` computes the same): the import system never imports the one, and the first import
    under a folder creates it; the other is new every run."""
    return _digest("\0".join(sorted(n for n in names if n != _BYTE_CODE_FOLDER
                                     and not n.startswith(_DOCTOR_FOLDER_PREFIX))).encode("utf-8", "surrogateescape"))


def _there(path, _stat=os.stat):
    """Whether ``path`` is there now, as :meth:`Evidence.new` finds it (``os.stat``, which follows links)."""
    try:
        _stat(path)
    except (OSError, ValueError):
        return False
    return True


def _startup_site_files():
    """The ``.pth`` files ``site`` read at startup, the folders their path lines name, and the user site folder
    where ``site`` would add one. What a ``.pth`` holds (a folder put on sys.path, an ``import`` line run before
    any probe) decides imports, and one rewritten in place changes neither its folder's names nor any file an
    import loaded; a folder absent at startup is on no sys.path (the user site folder, created, is searched
    before site-packages)."""
    site = sys.modules.get("site")
    if site is None:  # -S: no .pth was read
        return []
    out = []
    try:
        folders = list(site.getsitepackages())
        if site.ENABLE_USER_SITE:
            out.append(site.getusersitepackages())
            folders.append(out[-1])
    except Exception:  # noqa: BLE001 - a site module without these: nothing more to name
        return out
    for folder in folders:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.endswith(".pth"):
                out.append(os.path.join(folder, name))
                out += _pth_folders(folder, out[-1])
    return out


def _pth_folders(site_dir, pth):
    """The folders a ``.pth`` file's path lines name (``site.addpackage``): one that does not exist was left off
    sys.path, and created later it is searched."""
    try:
        with open(pth, encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    return [os.path.join(site_dir, line.rstrip()) for line in lines
            if line.strip() and not line.startswith(("#", "import ", "import\t"))]


class Evidence:
    """What this process has loaded, for the doctor's verdict cache: one identity per file, each file once.

    A verdict is reused only while every file it depended on is unchanged, so this names them all: the file
    of every module in ``sys.modules``, every file mapped into the process (extension modules and the
    libraries they pulled in, from /proc/self/maps), the file of every module the import system loaded code
    for (:func:`_watch_code_reads`), the interpreter and its ``pyvenv.cfg``, and the folders
    the import system searched (``sys.path`` and each package's ``__path__``: a file added there, such as a
    shadowing copy or a ``.pth``, changes the folder), the ``.pth`` files site read and the user site folder
    (:func:`_startup_site_files`); and what Python code read, listed or looked for and did not find
    (:func:`_watch_file_access`, :func:`_watch_existence_tests`). :meth:`new` returns what was not named before, as
    ``[path, dev, inode, size, mtime_ns, ctime_ns]`` (``[path]`` for a path that is not there), and a seventh
    element where the identity alone would change with no change to what an import gets:

    - a folder: ``"names:<digest>"``, its entry names but ``__pycache__`` (:func:`names_digest`). A folder's
      mtime changes when an import elsewhere creates its ``__pycache__``, as the first import of a one-file
      module of site-packages does, in this process or in a probe running beside it.
    - byte code this process's imports wrote: ``"wrote:<digest>"``, of the bytes written, which are the code
      the import ran. A probe beside it that compiled the same source wrote the file again; the same bytes are
      no change. Where the file no longer holds those bytes when it is named, it is named as changed.
    """

    def __init__(self, extra=()):
        self._seen = set()
        self._extra = list(extra)
        # Incremental, so a worker importing hundreds of modules does not re-walk everything per record: what
        # was named before is skipped by its raw spelling (no abspath, no stat), a module already looked at by its
        # object (its file does not change), a maps line by its text. What can change is still read every time:
        # sys.path, each package's __path__, the maps. A module's byte code that is not there (not written:
        # PYTHONDONTWRITEBYTECODE, a read-only folder) is named as absent: one written later is a change.
        self._raw = set()
        self._modules = {}  # name -> the module object whose __file__ / __cached__ were taken
        self._packages = {}  # name -> a module of those with a __path__, read again each time
        self._lines = set()
        self._site_named = False

    def _module_files(self, name, mod, out):
        self._modules[name] = mod
        d = vars(mod)  # not getattr: a module's __getattr__ may run code
        f = d.get("__file__")
        if isinstance(f, str):
            out.append(f)
        cached = d.get("__cached__")  # the byte code the import read counts as much; none there is named as absent
        if isinstance(cached, str) and cached != f:
            out.append(cached)
        if d.get("__path__") is not None:
            self._packages[name] = mod

    def _paths(self):
        out = [os.path.realpath(sys.executable), os.path.join(sys.prefix, "pyvenv.cfg")] + self._extra
        read = len(_CODE_READ)
        out += _CODE_READ[:read]
        del _CODE_READ[:read]
        opened = len(_OPENED)
        out += [p for p in _OPENED[:opened] if p not in _WRITTEN]  # read, then written by this process: its own
        del _OPENED[:opened]
        listed = len(_LISTED)
        out += [p for p in _LISTED[:listed] if p not in _WRITTEN]
        del _LISTED[:listed]
        looked = len(_ABSENT)  # named only while absent: one created since is the process's own (mkdir after exists)
        out += [p for p in _ABSENT[:looked] if p not in self._raw and p not in _WRITTEN and not _there(p)]
        del _ABSENT[:looked]
        if not self._site_named:  # read once: site ran before this process's first import
            self._site_named = True
            out += _startup_site_files()
        out += [p if p else os.curdir for p in sys.path if isinstance(p, str)]
        modules = self._modules
        for name, mod in list(sys.modules.items()):
            if modules.get(name) is not mod:
                try:
                    self._module_files(name, mod, out)
                except Exception:  # noqa: BLE001 - sys.modules can hold anything
                    continue
        for name, mod in list(self._packages.items()):  # a package's __path__ can grow (namespace packages)
            if sys.modules.get(name) is not mod:
                del self._packages[name]
                continue
            try:
                locations = vars(mod).get("__path__")
                if locations is not None and not isinstance(locations, str):
                    out += [x for x in list(locations) if isinstance(x, str)]
            except Exception:  # noqa: BLE001
                continue
        try:
            with open("/proc/self/maps") as fh:
                for line in fh:
                    if line in self._lines:
                        continue
                    self._lines.add(line)
                    parts = line.split(None, 5)
                    if len(parts) == 6 and _maps_a_file(parts[5]):
                        out.append(parts[5].rstrip("\n"))
        except OSError:
            pass
        return out

    def new(self):
        found = []
        for raw in self._paths():
            if raw in self._raw:
                continue
            self._raw.add(raw)
            gone = raw.endswith(" (deleted)")  # mapped, then replaced: what was loaded is no file now
            path = os.path.abspath(raw[:-len(" (deleted)")] if gone else raw)
            if path in self._seen:
                continue
            self._seen.add(path)
            if gone:
                found.append([path, -1, -1, -1, -1, -1])  # matches no file: the verdict is never reused
                continue
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                found.append([path])
                continue
            entry = [path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
            if stat.S_ISDIR(st.st_mode):
                try:
                    entry.append("names:" + names_digest(os.listdir(path)))
                except OSError:
                    pass  # unlistable: its identity alone
            elif path in _WROTE:
                wrote = _WROTE.pop(path)
                try:
                    with open(path, "rb") as fh:
                        same = fh.read() == wrote
                except OSError:
                    same = False
                if same:
                    entry.append("wrote:" + _digest(wrote))
                else:
                    entry = [path, -1, -1, -1, -1, -1]  # not the code that ran here: the verdict is never reused
            found.append(entry)
        return found
