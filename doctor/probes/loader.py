"""The dynamic loader's facts in the TARGET environment, for the doctor's static link check.

Stdlib only; run by the target interpreter with the engine environment (what
``wh env`` computes). Prints a record before anything is imported (the
loader cache ``ldconfig -p``, the loader's default folders from
``ld.so --help``, LD_LIBRARY_PATH, what the interpreter itself has mapped),
then, when torch is installed, imports it and prints a second record with
every shared object mapped after the import: extension modules that need
``libc10.so`` load because torch put it there. A crash inside ``import torch``
leaves the first record as the answer.
"""

import os
import platform
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # where _probe_channel lives (PYTHONSAFEPATH too)
from _probe_channel import Evidence, emit  # noqa: E402 - first: it takes this folder off sys.path again

import importlib.util  # noqa: E402


def _mapped():
    """Every file-backed shared object mapped into this process (/proc/self/maps)."""
    out = []
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    path = parts[5].strip()
                    if path.startswith("/") and ".so" in os.path.basename(path) and path not in out:
                        out.append(path)
    except OSError:
        pass
    return out


def _ldconfig():
    """[[name, flags, path], ...] from ``ldconfig -p``, in its order; None when no ldconfig runs."""
    for exe in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            proc = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        entries = []
        for line in proc.stdout.splitlines():
            # "	libz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1"
            left, sep, path = line.strip().partition(" => ")
            if not sep:
                continue
            name, _, flags = left.partition(" (")
            entries.append([name.strip(), flags.rstrip(")").strip(), path.strip()])
        return entries
    return None


def _loader_path(mapped):
    for path in mapped:
        if os.path.basename(path).startswith(("ld-linux", "ld64.so", "ld.so")):
            return path
    return None


def _default_dirs(loader):
    """The loader's own system search path (``ld.so --help``, glibc >= 2.33), else the usual folders."""
    if loader:
        try:
            # Without LD_LIBRARY_PATH: glibc lists its folders first, labelled "(system search path)" as well.
            env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
            out = subprocess.run([loader, "--help"], capture_output=True, text=True, timeout=20, env=env).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        dirs = [line.strip().rsplit(" (system search path)", 1)[0] for line in out.splitlines()
                if line.strip().endswith("(system search path)")]
        if dirs:
            return dirs, "ld.so --help"
    triplet = "%s-linux-gnu" % platform.machine()
    guess = ["/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    return [d for d in guess if os.path.isdir(d)], "guessed"


def main():
    mapped = _mapped()
    loader = _loader_path(mapped)
    dirs, dirs_source = _default_dirs(loader)
    machine = platform.machine()
    first = dirs[0] if dirs else ""
    rec = {
        "executable": os.path.realpath(sys.executable),
        "machine": machine,
        "loader": loader,
        "ld_library_path": [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p],
        "ldconfig": _ldconfig(),
        "default_dirs": dirs,
        "default_dirs_source": dirs_source,
        # $LIB: Debian's multiarch folder name, else lib64/lib by word size.
        "lib": first.lstrip("/") if first.endswith("-linux-gnu") and first.startswith("/lib/") else
        ("lib64" if sys.maxsize > 2 ** 32 else "lib"),
        "platform": machine,
        "mapped": mapped,
        "imported": [],
        "import_errors": {},
    }
    # What the doctor's verdict cache keys these facts by: the loader cache, every folder the loader searches
    # (a library added or removed there changes it), and every file this process loaded.
    evidence = Evidence(["/etc/ld.so.cache", "/etc/ld.so.conf"] + dirs + rec["ld_library_path"])
    if importlib.util.find_spec("torch") is None:
        emit(dict(rec, deps=evidence.new()))
        return
    emit(rec)
    try:
        import torch  # noqa: F401 - what it maps is the fact
        rec["imported"] = ["torch"]
    except BaseException as exc:  # noqa: BLE001 - a broken torch is native:torch's finding, not this probe's
        rec["import_errors"] = {"torch": "%s: %s" % (type(exc).__name__, exc)}
    rec["mapped"] = _mapped()
    rec["deps"] = evidence.new()
    emit(rec)


if __name__ == "__main__":
    main()
