"""Facts about the interpreter it runs in: platform, installed distributions, environment.

Stdlib only; run by the TARGET interpreter as ``python facts.py``. Prints one
JSON object after the marker line so stray output cannot break parsing. It
imports no installed distribution: everything comes from metadata on disk.
"""

import os
import stat
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # where _probe_channel lives (PYTHONSAFEPATH too)
from _probe_channel import emit  # noqa: E402 - first: it takes this folder off sys.path again

import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
import re  # noqa: E402
import importlib.metadata  # noqa: E402
import sysconfig  # noqa: E402


def _glibc():
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.35"
    except (AttributeError, ValueError, OSError):
        value = None
    if value and value.startswith("glibc "):
        return value.split()[1]
    name, version = platform.libc_ver()
    return version if name == "glibc" and version else None


def _suffixes():
    """The interpreter's extension suffixes, in the order its import system tries them (FileFinder)."""
    return list(importlib.machinery.EXTENSION_SUFFIXES)


def _is_extension(relpath):
    """An importable extension module: python-ABI suffix, or a bare .so/.pyd not named lib*."""
    base = relpath.rsplit("/", 1)[-1]
    for suffix in sorted(_suffixes(), key=len, reverse=True):
        if base.endswith(suffix):
            stem = base[: -len(suffix)]
            if not stem.isidentifier():
                return False
            if suffix in (".so", ".pyd") and stem.startswith("lib"):
                return False  # a plain shared library (libfoo.so), unless it exports PyInit_ (wh reads that)
            parts = relpath.split("/")[:-1]
            return all(p.isidentifier() for p in parts)
    return False


def _importable_folder(relpath):
    return all(p.isidentifier() for p in relpath.split("/")[:-1])


def _library_candidate(relpath):
    """``pkg/libfoo.so``: a library by its name, an extension module if it exports ``PyInit_libfoo``
    (triton's ``libtriton.so``). wh reads its symbols; this probe only names it."""
    base = relpath.rsplit("/", 1)[-1]
    for suffix in (".so", ".pyd"):
        if suffix in _suffixes() and base.endswith(suffix):
            stem = base[: -len(suffix)]
            return stem.startswith("lib") and stem.isidentifier() and _importable_folder(relpath)
    return False


# A Python extension module's file name for any interpreter: ``name.cpython-312-aarch64-linux-gnu.so``,
# ``name.abi3.so``, ``name.pypy310-pp73-x86_64-linux-gnu.so``, ``name.cp312-win_amd64.pyd``,
# ``name.cpython-312-darwin.so``. One this interpreter's suffixes do not load is for another target.
_ANY_EXTENSION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\.((?:cpython-\d+[a-z]*|pypy\d+-pp\d+|cp\d+[a-z]*|graalpy\d+)"
                            r"(?:-[0-9a-z_]+)*|abi3)\.(so|pyd)$")


def _loadable_name(base):
    """Does a suffix of this interpreter make ``base`` a module name (``_ext`` + ``.abi3.so``, not ``_ext.cp312``)?"""
    return any(base.endswith(s) and base[: -len(s)].isidentifier() for s in _suffixes())


def _foreign_extension(relpath):
    """The tag part of an extension module file name no suffix of this interpreter loads; None otherwise."""
    base = relpath.rsplit("/", 1)[-1]
    m = _ANY_EXTENSION.match(base)
    if not m or not _importable_folder(relpath) or _loadable_name(base):
        return None
    return m.group(2) + "." + m.group(3)


def _module_of(relpath):
    """``pkg/sub/_ext.cpython-312-x86_64-linux-gnu.so`` -> ``pkg.sub._ext`` (the name it is imported by)."""
    base = relpath.rsplit("/", 1)[-1]
    for suffix in sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True):
        if base.endswith(suffix):
            return ".".join(relpath.split("/")[:-1] + [base[: -len(suffix)]])
    return None


def _top_of(relpath):
    first = relpath.split("/", 1)[0]
    if "/" in relpath:
        return first if first.isidentifier() else None
    for suffix in sorted(importlib.machinery.all_suffixes(), key=len, reverse=True):
        if first.endswith(suffix):
            stem = first[: -len(suffix)]
            return stem if stem.isidentifier() else None
    return None


def _metadata(dist):
    """``dist.metadata``, also when METADATA is not UTF-8: importlib.metadata raises, the package still imports."""
    try:
        return dist.metadata
    except UnicodeDecodeError:
        path = getattr(dist, "_path", None)
        for name in ("METADATA", "PKG-INFO"):
            try:
                raw = (path / name).read_bytes()
            except (OSError, TypeError):
                continue
            import email

            return email.message_from_string(raw.decode("utf-8", "replace"))
        raise


_MISSING_SHOWN = 20


class _Listed(str):
    """A RECORD row as the checks below use it: its path (the str) and its size (``PackagePath``'s ``size``)."""

    __slots__ = ("size",)


def _row(n, fields):
    """One RECORD row, as importlib.metadata's ``make_file`` takes it (a size that is no integer is an error)."""
    if not 1 <= len(fields) <= 3:
        raise ValueError("RECORD line %d has %d fields, not path,hash,size" % (n, len(fields)))
    name, size_str = fields[0], (fields[2] if len(fields) == 3 else None)
    if name in ("", ".") or name.endswith("/") or "//" in name or "/./" in name or name.startswith("./"):
        import pathlib

        name = str(pathlib.PurePosixPath(name))  # what PackagePath makes of it
    row = _Listed(name)
    row.size = int(size_str) if size_str else None
    return row


def _listed_files(dist, path):
    """What ``dist.files`` lists. A .dist-info's RECORD is parsed here as importlib.metadata parses it (csv rows
    of path, hash, size; what it refuses is an error here too), without a ``PackagePath`` per row: those were ~40% of this probe's CPU
    (49k rows on the box). Any other layout (no RECORD, egg-info) through importlib.metadata."""
    if path is not None and str(path).endswith(".dist-info"):
        try:  # read here, not by dist.read_text, which answers None for a folder or a file it may not read
            st = os.stat(path / "RECORD")
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):  # a pipe would block this probe until its timeout
            raise OSError("RECORD is not a file (%s in its place)" % ("a folder" if stat.S_ISDIR(st.st_mode)
                                                                     else "a pipe, socket or device"))
        text = None
        if st is not None:
            with open(path / "RECORD", "rb") as fh:
                text = fh.read().decode("utf-8")
        if text:
            import csv

            return [_row(n, fields) for n, fields in enumerate(csv.reader(text.splitlines()), 1)]
    return list(dist.files or [])


def _record_facts(dist, path):
    """(RECORD paths, facts about RECORD): whether there is one, its error, the files it lists that are gone."""
    try:
        listed = _listed_files(dist, path)
    except Exception as exc:  # noqa: BLE001 - a corrupt RECORD is a fact, not a crash
        return [], {"record": "unreadable", "record_error": "%s: %s" % (type(exc).__name__, exc)}
    if not listed and path is not None and str(path).endswith(".dist-info") and not (path / "RECORD").exists():
        # Installers write RECORD last: an install that did not finish. A system package manager may leave it
        # out on purpose (Fedora's RPM macros drop it and own the files): INSTALLER says which wrote the folder.
        try:
            installer = (path / "INSTALLER").read_text("utf-8", "replace").strip()
        except OSError:
            installer = ""
        return [], {"record": "none", "installer": installer}
    rels = [str(f).replace("\\", "/") for f in listed]
    # A RECORD path is relative to the folder that holds the .dist-info (what f.locate() computes, at twice
    # the cost: ~100k rows for a serving stack).
    base = str(path.parent) if path is not None else None
    missing, resized = [], []
    for f, rel in zip(listed, rels):
        if rel.endswith((".pyc", ".pyo")) or "__pycache__/" in rel or not _top_of(rel):
            # Byte code is the installer's cache, and only what is under an importable name is imported:
            # launchers and distutils' stray paths (``../scripts/pip``, ``scripts-3.10/distro``) are not.
            continue
        try:
            st = os.lstat(os.path.join(base, rel) if base else str(f.locate()))
        except FileNotFoundError:
            missing.append(rel)
            continue
        except Exception:  # noqa: BLE001
            continue
        if stat.S_ISDIR(st.st_mode):
            missing.append(rel + " (a folder in its place)")  # no file there to import or load
            continue
        if stat.S_IFMT(st.st_mode) in (stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK):
            missing.append(rel + " (a pipe, socket or device in its place)")  # a read of it hangs or reads nothing
            continue
        # The same stat tells the size: a file cut short (a truncated .so) no longer matches its RECORD row.
        size = getattr(f, "size", None)
        if size is not None and stat.S_ISREG(st.st_mode) and st.st_size != size:
            resized.append("%s (%d bytes, RECORD: %d)" % (rel, st.st_size, size))
    return rels, {"record": "ok" if listed else "empty", "missing_files": missing[:_MISSING_SHOWN],
                  "missing_count": len(missing), "resized_files": resized[:_MISSING_SHOWN],
                  "resized_count": len(resized)}


def _code_unlisted(path, files, seen, hinted):
    """Whether a distribution's file list does not say where its code is: an .egg-info (no RECORD: its SOURCES.txt
    or installed-files.txt is no record of what is on disk), or an editable install (a .pth and a finder are all its
    RECORD lists) whose top_level.txt (``hinted``) names what none of its listed files provide."""
    if str(path).endswith(".egg-info"):
        return True
    editable = any(f.endswith(".pth") and "/" not in f for f in files)  # a finder or a path its .pth adds
    return editable and any(t.split(".", 1)[0] not in seen for t in hinted)


_UNLISTED_WALK = 20000  # files looked at under one distribution's unlisted code, at most


def _unlisted_extensions(tops, site):
    """The extension module files under the folders the import system finds ``tops`` in (``find_spec`` of a
    top-level name runs no package code): path relative to ``site`` (``../src/pkg/_core.so`` for a checkout) ->
    the dotted name it is imported by."""
    out, seen = {}, 0
    for top in dict.fromkeys(t.split(".", 1)[0] for t in tops):
        try:
            spec = importlib.util.find_spec(top)
        except Exception:  # noqa: BLE001 - a finder that raises: nothing found here (native imports it anyway)
            continue
        if spec is None:
            continue
        roots = list(spec.submodule_search_locations or ())
        if not roots and spec.origin and _is_extension(os.path.basename(spec.origin)):
            out[os.path.relpath(spec.origin, str(site)).replace(os.sep, "/")] = top
        for root in roots:
            for folder, dirs, names in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d.isidentifier())
                seen += len(names)
                rel = os.path.relpath(folder, os.path.dirname(root)).replace(os.sep, "/")
                for n in sorted(names):
                    if _is_extension(rel + "/" + n):
                        out[os.path.relpath(os.path.join(folder, n), str(site)).replace(os.sep, "/")] = \
                            _module_of(rel + "/" + n)
                if seen > _UNLISTED_WALK:
                    break
    return out


def _dist_info(dist, meta):
    name = meta["Name"] or ""
    path = getattr(dist, "_path", None)
    files, record = _record_facts(dist, path)
    own = [f for f in files if not f.startswith("..") and ".dist-info/" not in f]
    ext = [f for f in own if _is_extension(f)]
    tops = []
    try:
        text = dist.read_text("top_level.txt")
    except Exception:  # noqa: BLE001
        text = None
    if text:
        tops = [t.strip().replace("/", ".") for t in text.splitlines() if t.strip()]
    hinted = [t for t in tops if t.isidentifier()]  # top_level.txt's names, before RECORD's files sort them
    seen = []  # the names the distribution's files provide
    for f in files:
        if f.startswith("..") or ".dist-info/" in f or ".data/" in f.split("/", 1)[0] + "/":
            continue
        top = _top_of(f)
        if top and top != "__pycache__" and top not in seen:
            seen.append(top)
    if files:
        # The names a distribution provides are the ones its files provide (RECORD: what is on disk).
        # top_level.txt is a hint only: it can be stale (xxhash lists `_xxhash`, which moved into xxhash/)
        # or incomplete (a package in RECORD it leaves out is importable all the same), so it only orders.
        tops = [t for t in tops if t.split(".", 1)[0] in seen]
        tops = tops + [t for t in seen if t not in tops]
    elif not tops:
        tops = seen
    if path is not None and _code_unlisted(path, files, seen, hinted):
        # An egg-info (setup.py install, Debian's python3-*) or an editable install (its RECORD lists only the .pth
        # and finder): where its code is, the import system says, and the extension modules there are its own.
        found = _unlisted_extensions([*tops, *hinted], path.parent)
        ext += [f for f in found if f not in ext]
        tops = tops + [t for t in (m.split(".", 1)[0] for m in found.values()) if t not in tops]
    else:
        found = {}
    module_of = {f: found.get(f) or _module_of(f) for f in ext}
    ext_tops = []
    for f in ext:
        top = (module_of[f] or "").split(".", 1)[0] or None
        if top and top not in ext_tops:
            ext_tops.append(top)
    return {
        "name": name,
        "version": meta["Version"],
        "dist_info": str(path) if path else None,
        "location": str(path.parent) if path else None,
        "top_level": tops,
        "extension_modules": len(ext),
        "extension_sample": ext[:5],
        "extension_top_level": ext_tops,
        "extensions": [[f, module_of[f]] for f in ext],
        "library_candidates": [[f, _module_of(f)] for f in own if _library_candidate(f)],
        "foreign_extensions": [[f, tag] for f in own for tag in [_foreign_extension(f)] if tag],
        "has_record": bool(files),
        "scripts": _script_facts(dist, files, path.parent if path else None),
        **record,
        "requires": list(meta.get_all("Requires-Dist") or []),
    }


_SH_EXEC = b"'''exec' "  # pip's launcher for an interpreter path too long for a shebang: /bin/sh, then this line


def _script_facts(dist, files, site):
    """Each console/GUI script the distribution declares, with what stops it from running (None: nothing found): a
    launcher its RECORD lists whose interpreter is gone (a venv moved or copied to another path keeps the old one in
    every shebang; a launcher RECORD lists that is not on disk is install:records'), or a module the entry point
    names that is not there (looked up by file under the package the import system finds: no package code runs)."""
    launchers = {f.rsplit("/", 1)[-1]: os.path.normpath(os.path.join(str(site), f))
                 for f in files if site is not None and f.startswith("..")}
    try:
        text = dist.read_text("entry_points.txt") or ""
    except Exception:  # noqa: BLE001
        return []
    out, section = [], None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif "=" in line and section in ("console_scripts", "gui_scripts"):
            name, _, value = (x.strip() for x in line.partition("="))
            module = value.split(":", 1)[0].split("[", 1)[0].strip()
            out.append([name, value, _script_problem(launchers.get(name), module)])
    return out


def _launcher_interpreter(head):
    """The interpreter a launcher's first lines run (bytes; None: not said)."""
    if not head[0].startswith(b"#!"):
        return None
    words = head[0][2:].split()
    runs = words[0] if words else None
    if runs == b"/bin/sh" and len(head) > 1 and head[1].startswith(_SH_EXEC):
        rest = head[1][len(_SH_EXEC):].lstrip()
        quote = rest[:1]
        if quote in (b'"', b"'") and rest.count(quote) >= 2:  # pip quotes it "..." and uv '...'
            runs = rest.split(quote)[1]
        elif rest.startswith((b'"$(', b"$(")):
            return None  # uv's relocatable form: the interpreter beside the launcher, wherever it is
        else:
            runs = (rest.split() or [None])[0]
    return runs


def _another_environment(launcher, runs):
    """Where a launcher in this environment's scripts folder runs another environment's interpreter (a venv copied
    with ``cp -a`` while the original is still there: every shebang names the original, which runs its own
    packages), what to say; None where it runs this one's, or where this is not a venv's own launcher."""
    if not launcher or not runs or not runs.startswith(b"/") or sys.prefix == sys.base_prefix:
        return None
    scripts = os.path.join(sys.prefix, "bin")
    try:
        if os.path.realpath(os.path.dirname(launcher)) != os.path.realpath(scripts):
            return None  # a launcher outside this venv's scripts folder (a base system's package): not ours to judge
        runs_path = os.fsdecode(runs)
        if os.path.realpath(os.path.dirname(runs_path)) == os.path.realpath(scripts):
            return None
        if os.path.realpath(runs_path) == os.path.realpath(sys.executable) and \
                os.path.dirname(os.path.abspath(runs_path)) == os.path.dirname(os.path.abspath(sys.executable)):
            return None
    except (OSError, ValueError):
        return None
    return ("its launcher %s runs %s, another environment's interpreter (this one's is %s): it runs that "
            "environment's packages, not these (a venv copied while the original is still there)" % (
                launcher, runs_path, os.path.join(scripts, os.path.basename(sys.executable))))


def _script_problem(launcher, module):
    try:
        with open(launcher, "rb") as fh:
            head = fh.read(1024).split(b"\n")
    except (OSError, TypeError):  # TypeError: RECORD lists none (a system package's launcher lives elsewhere)
        head = [b""]
    if head[0].startswith(b"#!") and head[0].endswith(b"\r"):
        return "its launcher %s has a CRLF line end: the kernel runs %r, which is not there" % (
            launcher, os.fsdecode(head[0][2:].split(b" ")[0]))
    runs = _launcher_interpreter(head)
    if runs and runs.startswith(b"/") and not os.access(os.fsdecode(runs), os.X_OK):
        return "its launcher %s runs %s, which is not there (a venv moved or copied elsewhere keeps its old path)" % (
            launcher, os.fsdecode(runs))
    other = _another_environment(launcher, runs)
    if other:
        return other
    if launcher is not None and head != [b""] and not os.access(launcher, os.X_OK):
        return "its launcher %s is not executable (its mode lost the x bits: `%s` fails with Permission denied)" % (
            launcher, os.path.basename(launcher))
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    try:
        spec = importlib.util.find_spec(parts[0])
    except Exception:  # noqa: BLE001 - a finder that raises: not judged here
        return None
    if spec is None:
        return "its entry point's module %s is not installed (no %s)" % (module, parts[0])
    folders = list(spec.submodule_search_locations or ())
    for i, part in enumerate(parts[1:], 1):
        here = ".".join(parts[:i + 1])
        if not folders:
            return "its entry point's module %s is not installed (%s is a module, not a package)" % (
                module, ".".join(parts[:i]))
        packages = [os.path.join(f, part) for f in folders if os.path.isdir(os.path.join(f, part))]
        if packages:
            folders = packages
            continue
        if any(os.path.isfile(os.path.join(f, part + s)) for f in folders for s in importlib.machinery.all_suffixes()):
            folders = []
            continue
        return "its entry point's module %s is not installed (no %s)" % (module, here)
    return None


def _meminfo():
    out = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def _named(dist):
    """(key, metadata) of one distribution, or (key, error record) where its metadata cannot be read."""
    try:
        meta = _metadata(dist)
    except Exception as exc:  # noqa: BLE001
        info = {"name": str(getattr(dist, "_path", "?")), "error": repr(exc)}
        return info["name"].lower(), info
    if not meta["Name"]:  # an empty or cut-short METADATA: the distribution is there, its facts are not
        path = str(getattr(dist, "_path", "?"))
        return path.lower(), {"name": path, "error": "METADATA names no distribution (empty or cut short)"}
    return (meta["Name"] or "").lower().replace("_", "-").replace(".", "-"), meta


def _described(dist, meta):
    try:
        return _dist_info(dist, meta)
    except Exception as exc:  # noqa: BLE001
        return {"name": str(getattr(dist, "_path", "?")), "error": repr(exc)}


_DUPLICATES = []  # a second .dist-info of a name in the same folder as the first: {name, version, dist_info, ...}


def _second_copy(first, dist):
    """Note ``dist``, a later copy of ``first``'s name, where it sits in the same folder: which of two is read there
    is the order the folder lists them (another copy earlier on sys.path is plain shadowing)."""
    here, there = getattr(first, "_path", None), getattr(dist, "_path", None)
    if here is None or there is None or str(here.parent) != str(there.parent):
        return
    try:
        version = dist.version
    except Exception:  # noqa: BLE001 - a METADATA that cannot be read is still a copy
        version = None
    _DUPLICATES.append({"name": str(first.metadata["Name"] or ""), "version": version, "dist_info": str(there),
                        "location": str(there.parent), "first": str(here)})


def _distributions():
    """Every distribution the interpreter sees, the first on sys.path of each name (as for an import).

    Reading METADATA and RECORD and stat-ing every file RECORD lists is waiting on the disk: on a fresh box
    (49k files, nothing cached) one thread waits on each in turn. Threads overlap the waits (reads and
    ``lstat`` release the GIL); the order of the answer is sys.path's all the same.
    """
    found = list(importlib.metadata.distributions())
    with ThreadPoolExecutor(max_workers=min(16, max(4, 2 * (os.cpu_count() or 1)))) as pool:
        named = list(pool.map(_named, found))
        first, seen = [], {}
        for dist, (key, meta) in zip(found, named):
            if key not in seen:  # a later copy of a name is shadowed: its RECORD is not walked
                seen[key] = dist
                first.append((dist, meta))
            else:
                _second_copy(seen[key], dist)
        futures = [meta if isinstance(meta, dict) else pool.submit(_described, dist, meta) for dist, meta in first]
        return [f if isinstance(f, dict) else f.result() for f in futures]


def _markers(capture):
    """The PEP 508 marker environment of this interpreter, by wh's capture script (``wh target capture``'s, at path
    ``capture``): what pip judges requirement markers by here. None where it cannot be loaded."""
    try:
        spec = importlib.util.spec_from_file_location("_wh_capture_target", capture)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.marker_environment()
    except Exception:  # noqa: BLE001 - no markers: the doctor judges them by its own interpreter's
        return None


def main(argv):
    dists = _distributions()
    paths = sysconfig.get_paths()
    emit({
        "executable": sys.executable,
        "implementation": sys.implementation.name,
        "python_version": "%d.%d" % sys.version_info[:2],
        "python_full_version": platform.python_version(),
        "soabi": sysconfig.get_config_var("SOABI"),
        "machine": platform.machine(),
        "system": platform.system(),
        "glibc": _glibc(),
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "purelib": paths.get("purelib"),
        "platlib": paths.get("platlib"),
        "scripts": paths.get("scripts"),
        "sys_path": [p for p in sys.path if p],
        "extension_suffixes": list(importlib.machinery.EXTENSION_SUFFIXES),
        "environ": dict(os.environ),
        "memory": _meminfo(),
        "cpu_count": os.cpu_count(),
        "markers": _markers(argv[0]) if argv else None,
        "distributions": dists,
        "duplicates": _DUPLICATES,
    })


if __name__ == "__main__":
    main(sys.argv[1:])
