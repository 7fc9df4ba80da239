"""Import modules one after another and report each: ``python imports.py MOD[=FILE] [MOD[=FILE] ...]``.

Stdlib only; run by the TARGET interpreter. Before each import it prints a
``start`` record, after it a ``result`` record (find_spec's answer, the error
and its traceback), so the runner knows which module a crash or hang belongs
to. It ends with ``os._exit`` so atexit handlers of imported modules cannot
hang or crash a finished probe.

``MOD=FILE``: MOD is the dotted name of extension module FILE. It is imported by
that name only if that is how the package gets it: when find_spec(MOD) does not
resolve to FILE, or the package's own import already initialised FILE as a
module under another name (cv2's loader imports cv2/cv2.abi3.so as ``cv2``),
the record says so (``covered``) and nothing is imported by that name. Where
FILE's folder is not one the import system searches for MOD (another copy of
the package, earlier on sys.path, serves the name), MOD is imported: that copy
is what the engine gets. A module that fails only as a circular import back
into itself is imported again through the sibling module the cycle runs through
(``via``), as its package does. A module imported by name alone (no FILE) also
reports what its import loaded (``reached``: the names new in sys.modules).
``MOD@library=FILE``: FILE is a library its package loads by path (no Python init function:
``torch.ops.load_library``, ctypes), named after its place (``torchvision._C@library``). Its
top-level package is imported; if that import mapped FILE, it loaded; else it is loaded here as
``torch.ops.load_library`` loads it (``ctypes.CDLL``: every symbol bound now), and the record says
whether the package's import had asked for it (``library_load``: a failure it swallowed).
``MOD@library-asked=FILE``: the same, but FILE is loaded here only where the package's import asked
for it (a plugin of another program is not loaded into a process it was not made for).
A dotted name under a top-level name that failed to import earlier in the same
process is not imported (a ``skipped`` record). Each result record carries ``deps``: the files (with their identities) the
process loaded since the previous record, for the doctor's verdict cache.
"""

import sys

_AT_START = frozenset(sys.modules)  # what this interpreter loads before any code of ours: a plain start's modules

import os  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # where _probe_channel lives (PYTHONSAFEPATH too)
from _probe_channel import Evidence, emit, written_files  # noqa: E402 - first: it takes this folder off sys.path

import importlib  # noqa: E402
import importlib.util  # noqa: E402
import types  # noqa: E402

_find_spec = importlib.util.find_spec  # bound now: importlib.util is forgotten before the first import (below)
from importlib.machinery import PathFinder as _PathFinder  # noqa: E402 - the same: bound before it is forgotten

_out = os.fdopen(os.dup(1), "w")  # our channel, kept even if a module rebinds sys.stdout


def _emit(obj):
    emit(obj, _out)


def _real(path):
    try:
        return os.path.realpath(path)
    except (OSError, TypeError, ValueError):
        return None


_LIBRARY = "@library"
_ASKED_ONLY = "@library-asked"
_DLOPENED = set()  # what ctypes was asked to load (torch.ops.load_library goes through it), by real path


def _watch_dlopens():
    def hook(event, args):
        if event != "ctypes.dlopen":
            return
        try:
            name = args[0]
            name = os.fsdecode(name) if isinstance(name, bytes) else name
            if isinstance(name, str) and os.sep in name:
                _DLOPENED.add(_real(name))
        except Exception:  # noqa: BLE001 - an audit hook must never break the code it watches
            pass

    try:
        sys.addaudithook(hook)
    except Exception:  # noqa: BLE001 - no hook: every library counts as loaded on demand
        pass


_watch_dlopens()


def _mapped_files():
    """The files mapped into this process now (/proc/self/maps; None: the maps cannot be read)."""
    try:
        with open("/proc/self/maps") as fh:
            return {line.split(None, 5)[5].rstrip("\n") for line in fh if line.count(" ") >= 5 and "/" in line}
    except (OSError, IndexError):
        return None


def _is_mapped(real, mapped):
    """Is file ``real`` among ``mapped`` (:func:`_mapped_files`), by its path or the real path of one of that name?"""
    if not mapped:
        return False
    return real in mapped or any(_real(p) == real for p in mapped if os.path.basename(p) == os.path.basename(real))


def _loaded_instead(top, real, mapped):
    """Another library of package ``top`` its import asked for and that is mapped: a package that tries one build
    per ABI or CUDA version and keeps the first that loads went past ``real`` (None: it loaded none)."""
    try:
        folder = os.path.dirname(_real(vars(sys.modules[top])["__file__"])) + os.sep
    except Exception:  # noqa: BLE001 - a namespace package, an odd module: no folder to look in
        return None
    for other in sorted(p for p in _DLOPENED if p and p != real and p.startswith(folder)):
        if _is_mapped(other, mapped):
            return other[len(folder):]
    return None


def _probe_library(name, path):
    """A library its package loads by path: loaded by the package's import, or loadable here (RTLD_NOW)."""
    rec = {"event": "result", "module": name, "ok": False, "found": True, "origin": path, "error_type": None,
           "error": None, "missing": None, "traceback": None}
    t0 = time.monotonic()
    top = name.split(".", 1)[0]
    try:
        _importing(top)
    except BaseException as exc:  # noqa: BLE001 - its package's own verdict says why
        rec.update(error_type=type(exc).__name__, error="its package %s does not import: %s" % (top, exc),
                   library_load="its package does not import")
        rec["seconds"] = round(time.monotonic() - t0, 4)
        return rec
    real = _real(path)
    asked = real in _DLOPENED
    mapped = _mapped_files()
    if _is_mapped(real, mapped):
        rec.update(ok=True, library_load="loaded by its package's import" if asked else "loaded (already mapped)")
    elif not asked and name.endswith(_ASKED_ONLY):
        rec.update(ok=True, library_load="not loaded: its package's import does not load it (on demand)")
    else:
        try:
            import ctypes

            ctypes.CDLL(path)
            rec.update(ok=True, library_load="its package's import asked for it and it loads here" if asked else
                       "loaded on demand: its package's import does not load it; it loads here")
        except OSError as exc:
            instead = _loaded_instead(top, real, mapped) if asked else None
            rec.update(error_type="OSError", error=str(exc),
                       library_load=("its package's import tried it and loaded another build instead: " + instead)
                       if instead else "asked for by its package's import, which went on without it" if asked else
                       "loaded on demand: its package's import does not load it")
    rec["seconds"] = round(time.monotonic() - t0, 4)
    return rec


def _file_of(obj):
    try:
        f = vars(obj).get("__file__")  # not getattr: a module's __getattr__ may run code
    except Exception:  # noqa: BLE001 - sys.modules can hold anything
        return None
    return f if isinstance(f, str) else None


def _initialised_from(real, top):
    """The name of a module object made from file ``real``: in sys.modules, or an attribute of a module of
    package ``top`` (cv2 keeps its native module as ``cv2._native``); None when there is none."""
    base = os.path.basename(real)

    def same(obj):
        f = _file_of(obj)
        return f is not None and os.path.basename(f) == base and _real(f) == real

    for key, mod in list(sys.modules.items()):
        if same(mod):
            return key
    for key, mod in list(sys.modules.items()):
        if key == top or key.startswith(top + "."):
            try:
                attrs = list(vars(mod).items())
            except Exception:  # noqa: BLE001
                continue
            for attr, obj in attrs:
                if isinstance(obj, types.ModuleType) and same(obj):
                    return "%s.%s" % (key, attr)
    return None


def _search_path_of(name):
    """Where the import system looks for ``name``: its parent package's ``__path__``, else ``sys.path``."""
    parent = name.rpartition(".")[0]
    if not parent:
        return list(sys.path)
    try:
        locations = vars(sys.modules[parent]).get("__path__")  # find_spec imported the parent already
    except Exception:  # noqa: BLE001 - sys.modules can hold anything
        return None
    try:
        return list(locations) if locations is not None else None
    except Exception:  # noqa: BLE001
        return None


def _shadowing_copy(name, spec, path):
    """Where ``import name`` looks instead of file ``path``'s folder, when that folder is not one the import
    system searches for ``name``: another copy of its package (earlier on sys.path: PYTHONPATH, a .pth, a
    second site folder, a checkout) is what the engine gets. None where ``path`` is the file it finds."""
    if spec is not None and spec.origin and _real(spec.origin) == _real(path):
        return None
    locations = _search_path_of(name)
    if not locations:
        return None
    folder = _real(os.path.dirname(os.path.abspath(path)))
    mine = [p for p in locations if isinstance(p, str)]
    if any(_real(p) == folder for p in mine):
        return None
    return mine[0] if mine else None


def _taken_instead(name, origin, real):
    """Does the import system take ``origin`` for ``name`` from file ``real``'s own folder: another file of that
    name there (a stale build whose suffix comes first: ``_rust.cpython-311-x86_64-linux-gnu.so`` beside a
    healthy ``_rust.abi3.so``), or a package folder of that name there? Then that is what loads, and importing
    the name is the check."""
    folder = os.path.dirname(real)
    origin = _real(origin)
    leaf = name.rpartition(".")[2]
    if os.path.basename(real).split(".", 1)[0] != leaf:
        return False  # this file is no build of that name
    if os.path.dirname(origin) == folder:
        return os.path.basename(origin).split(".", 1)[0] == leaf
    package = os.path.dirname(origin)
    return os.path.basename(origin).startswith("__init__.") and os.path.basename(package) == leaf \
        and os.path.dirname(package) == folder


def _covered(name, spec, path):
    """Why extension module file ``path`` is not to be imported as ``name`` (None: import it)."""
    if name in sys.modules:
        return None  # imported by that name already: importing it is the check
    if spec is None:
        return "find_spec(%r) is None: the import system never loads this file by that name" % name
    real = _real(path)
    if not spec.origin or _real(spec.origin) != real:
        if spec.origin and _taken_instead(name, spec.origin, real):
            return None  # a stale build or a package folder beside it wins: what the import system loads is checked
        return "find_spec(%r) resolves to %s, not this file" % (name, spec.origin)
    other = _initialised_from(real, name.split(".", 1)[0])
    if other:
        return "its package already loaded this file itself, as %s" % other
    return None


def _probe(name, path=None):
    rec = {"event": "result", "module": name, "ok": False, "found": None, "origin": None,
           "error_type": None, "error": None, "missing": None, "traceback": None}
    spec = None
    spec_exc = None
    try:
        spec = _find_spec(name)
        rec["found"] = spec is not None
        if spec is not None:
            rec["origin"] = spec.origin if spec.origin not in (None, "namespace") else (
                list(spec.submodule_search_locations or [])[:1] or [None])[0]
    except BaseException as exc:  # noqa: BLE001 - find_spec itself can run package code
        rec["found"] = None
        rec["find_spec_error"] = "%s: %s" % (type(exc).__name__, exc)
        spec_exc = exc
    if path is not None and "find_spec_error" not in rec:
        rec["shadowed"] = _shadowing_copy(name, spec, path)
        covered = None if rec["shadowed"] else _covered(name, spec, path)
        if covered:
            rec.update(ok=True, covered=covered, seconds=0.0)
            return rec
    t0 = time.monotonic()
    before = set(sys.modules) if path is None else None
    asked = set()
    try:
        _importing(name, asked if path is None and "." not in name else None)
        if "find_spec_error" in rec and _failed_package(name) is not None:
            # the package above raised (find_spec ran its __init__): the name imported only because that failed
            # import left this module in sys.modules; an engine's `import pkg.sub._core` fails in the package
            raise ImportError("its package %s failed to import: %s" % (_failed_package(name), rec["find_spec_error"])) \
                from spec_exc
        rec["ok"] = True
        if before is not None:
            # What importing it loads: the modules of the stack its entries reach (a verdict's severity).
            rec["reached"] = sorted(k for k in list(sys.modules) if k not in before)
            rec["reached_files"] = _files_of(rec["reached"])
            borrowed = _borrowed(name, asked, before)
            if borrowed:
                rec["borrowed"] = borrowed
    except BaseException as exc:  # noqa: BLE001 - SystemExit from an import is a failure too
        via = _cycle_entry(name, spec, exc)
        if via is not None and _import_through(via, name):
            rec.update(ok=True, via=via)
        else:
            rec["error_type"] = type(exc).__name__
            rec["error"] = str(exc)
            if isinstance(exc, ModuleNotFoundError):
                rec["missing"] = exc.name  # the module that is not there (not always the one asked for)
                rec["chain"] = _earlier_failures(exc)
            else:
                under = _missing_under(exc) if isinstance(exc, ImportError) and exc.name is None else None
                rec["missing"] = under.name if under is not None else None
                rec["chain"] = _earlier_failures(under if under is not None else exc)
            rec["failed_in"] = _failed_package(name)
            rec["cause_files"] = _cause_files(exc)
            rec["traceback"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    rec["seconds"] = round(time.monotonic() - t0, 4)
    return rec


_STDLIB = os.path.dirname(os.path.abspath(os.__file__))


def _files_of(names):
    """The file each module in ``names`` was loaded from, the standard library's left out (a site folder below it,
    as a system Python has, is not the standard library): what the doctor compares with the RECORDs."""
    out = {}
    for k in names:
        try:
            f = getattr(sys.modules.get(k), "__file__", None)
        except Exception:  # noqa: BLE001 - a module whose __getattr__ raises names no file
            f = None
        if not isinstance(f, str) or not f:
            continue
        f = os.path.abspath(f)
        if f.startswith(_STDLIB + os.sep) and "site-packages" not in f and "dist-packages" not in f:
            continue
        out[k] = f
    return out


def _earlier_failures(exc, most=4):
    """The exceptions ``exc`` was raised from or while handling, earliest first: a fallback import
    (``try: from ._kernels import f`` / ``except ImportError: from numexpr import f``) hides a broken build
    behind the last, missing, module. Suppressed ones (``raise ... from None``) count too: the build is as broken."""
    out, seen, link = [], {id(exc)}, _earlier(exc)
    while link is not None and id(link) not in seen and len(out) < most:
        seen.add(id(link))
        out.append({"error_type": type(link).__name__, "error": str(link)[:2000],
                    "missing": link.name if isinstance(link, ModuleNotFoundError) else None})
        link = _earlier(link)
    return out[::-1]


def _cause_files(exc, most=60):
    """The source files the tracebacks of the exceptions ``exc`` was raised from or while handling pass through: a
    framework that loads its plugins at import re-raises a plugin's failure as its own, and the traceback kept
    (its last lines) shows only the framework's frames; the plugin's are here."""
    out, seen, link = [], {id(exc)}, _earlier(exc)
    while link is not None and id(link) not in seen and len(out) < most:
        seen.add(id(link))
        try:
            out += [f.filename for f in traceback.extract_tb(link.__traceback__)
                    if f.filename and not f.filename.startswith("<")]
        except Exception:  # noqa: BLE001 - a traceback that cannot be walked names nothing
            pass
        link = _earlier(link)
    return list(dict.fromkeys(out))[:most]


def _missing_under(exc):
    """The ModuleNotFoundError under ``exc`` where every exception between them is an ImportError raised while
    handling it: a package that re-raises "No module named 'torch'" as its own message (openvino's PyTorch
    frontend), or the failure of the package above a module. None where another kind of failure comes first (an
    undefined symbol a fallback hid is that build's failure, not a missing module's)."""
    seen, link = {id(exc)}, _earlier(exc)
    while link is not None and id(link) not in seen:
        if isinstance(link, ModuleNotFoundError):
            return link
        if not isinstance(link, ImportError) or getattr(link, "name", None) is not None:
            return None  # another failure, or the import system's own (`cannot import name`): that one counts
        seen.add(id(link))
        link = _earlier(link)
    return None


def _earlier(exc):
    if exc.__cause__ is not None:
        return exc.__cause__
    if exc.__suppress_context__:
        # importlib's own `raise ModuleNotFoundError(...) from None` ('x' is not a package) hides its internals
        # (an AttributeError on __path__): no failure of the module's code.
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None and tb.tb_frame.f_code.co_filename.startswith("<frozen importlib"):
            return None
    return exc.__context__


def _failed_package(name):
    """The package above ``name`` whose own import failed (a failed import leaves it out of sys.modules), or None:
    importing ``acme.fast._core`` fails where ``acme/fast/__init__.py`` does, and that is ``acme.fast``'s failure."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent not in sys.modules:
            return parent
    return None


def _cycle_entry(name, spec, exc):
    """The sibling module through which ``name`` is meant to be imported, when importing ``name`` first failed
    only as a circular import back into it (scipy.linalg._matfuncs_sqrtm_triu imports _matfuncs_sqrtm, which
    imports it: entered from _matfuncs_sqrtm it loads); None otherwise."""
    if type(exc) is not ImportError or spec is None or not spec.origin:  # not ModuleNotFoundError either
        return None
    if "partially initialized module '%s'" % name not in str(exc) or "." not in name:
        return None
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename if tb is not None else ""
    folder, base = os.path.split(where)
    stem = base[:-3] if base.endswith(".py") else ""
    if not stem.isidentifier() or stem == "__init__" or _real(folder) != _real(os.path.dirname(spec.origin)):
        return None
    return "%s.%s" % (name.rsplit(".", 1)[0], stem)


def _import_through(via, name):
    try:
        _importing(via)
    except BaseException:  # noqa: BLE001 - the first failure stays the verdict
        return False
    return name in sys.modules


_HIDDEN = []  # (package, attribute, module): the probe's own submodules of a package a plain start has loaded


def _forget_machinery():
    """Take the modules this probe's own code loaded (json, ctypes, importlib.util, collections.abc...) out of
    ``sys.modules``, so each import meets what a plain start of this interpreter has: a package that calls
    ``importlib.util.find_spec`` after a bare ``import importlib`` fails here as it fails for the engine (it passed
    while the probe's own ``import importlib.util`` had made the attribute). The probe's code keeps its references;
    a module the tested code imports is loaded afresh for it. Such a module that is an attribute of a package a
    plain start has (``collections.abc``) is taken off it only while an import runs (:func:`_importing`): the
    probe's own code (traceback's) uses it so."""
    for name in [n for n in sys.modules if n not in _AT_START]:
        module = sys.modules.pop(name)
        parent, _, child = name.rpartition(".")
        if parent in _AT_START and getattr(sys.modules.get(parent), child, None) is module:
            _HIDDEN.append((sys.modules[parent], child, module))


def _borrowed(name, asked, before):
    """The top-level modules importing ``name`` asked for that an earlier import of this process had put in
    sys.modules and that no file on sys.path serves (a name one package registers for another, ``sys.modules[
    'engine_compat'] = ...``): imported first in a process of its own, ``name`` may not find them."""
    out = []
    for mod in sorted(asked):
        if mod == name or mod not in before or mod in _AT_START or mod in sys.builtin_module_names:
            continue
        try:
            if _PathFinder.find_spec(mod) is not None:
                continue
        except Exception:  # noqa: BLE001 - a path entry hook that raises: judged by the run alone
            pass
        out.append(mod)
    return out


def _importing(name, asked=None):
    """``importlib.import_module(name)`` with the probe's own submodules off their packages (see above); ``asked``:
    a set given the top-level name of every import statement the import runs."""
    if asked is not None:
        import builtins

        real = builtins.__import__

        def noting(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0 and isinstance(name, str) and name:
                asked.add(name.partition(".")[0])
            return real(name, globals, locals, fromlist, level)

        builtins.__import__ = noting
        try:
            return _importing(name)
        finally:
            if builtins.__import__ is noting:
                builtins.__import__ = real
    hidden = []
    for package, child, module in _HIDDEN:
        if getattr(package, child, None) is module:
            try:
                delattr(package, child)
                hidden.append((package, child, module))
            except Exception:  # noqa: BLE001 - a package that refuses it keeps it
                pass
    try:
        return importlib.import_module(name)
    finally:
        for package, child, module in hidden:
            if not hasattr(package, child):  # the tested code's own import of it stays
                setattr(package, child, module)


def main(args):
    evidence = Evidence()
    _forget_machinery()
    failed = set()  # top-level names whose import failed in this process
    for arg in args:
        name, sep, path = arg.partition("=")  # a dotted name never holds '='; a path may
        top = name.split(".", 1)[0]
        if "." in name and top in failed:
            # Its package did not import here: importing it would fail the same way (or hang again). The
            # doctor loads it once its package's verdict, confirmed alone, is known to be ok.
            _emit({"event": "skipped", "module": name, "because": top})
            continue
        _emit({"event": "start", "module": name})
        rec = _probe_library(name, path) if name.endswith((_LIBRARY, _ASKED_ONLY)) else \
            _probe(name, path if sep else None)
        if "." not in name and not rec.get("ok"):
            failed.add(name)
        # What this process has loaded that no earlier record named: a verdict depends on every file loaded
        # before it in this process, so the doctor's cache keys it by all records' "deps" up to its own.
        rec["deps"] = evidence.new()
        _emit(rec)
    # What this process wrote (a state file an import reads, then rewrites from a thread): no evidence of any record.
    _emit({"event": "done", "written": written_files()})
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
