"""Import modules one after another and report each: ``python imports.py MOD [MOD ...]``.

Stdlib only; run by the TARGET interpreter. Before each import it prints a
``start`` record, after it a ``result`` record (find_spec's answer, the error
and its traceback), so the runner knows which module a crash or hang belongs
to. It ends with ``os._exit`` so atexit handlers of imported modules cannot
hang or crash a finished probe.
"""

import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # where _probe_channel lives (PYTHONSAFEPATH too)
from _probe_channel import emit  # noqa: E402 - first: it takes this folder off sys.path again

import importlib  # noqa: E402
import importlib.util  # noqa: E402

_out = os.fdopen(os.dup(1), "w")  # our channel, kept even if a module rebinds sys.stdout


def _emit(obj):
    emit(obj, _out)


def _probe(name):
    rec = {"event": "result", "module": name, "ok": False, "found": None, "origin": None,
           "error_type": None, "error": None, "traceback": None}
    try:
        spec = importlib.util.find_spec(name)
        rec["found"] = spec is not None
        if spec is not None:
            rec["origin"] = spec.origin if spec.origin not in (None, "namespace") else (
                list(spec.submodule_search_locations or [])[:1] or [None])[0]
    except BaseException as exc:  # noqa: BLE001 - find_spec itself can run package code
        rec["found"] = None
        rec["find_spec_error"] = "%s: %s" % (type(exc).__name__, exc)
    t0 = time.monotonic()
    try:
        importlib.import_module(name)
        rec["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - SystemExit from an import is a failure too
        rec["error_type"] = type(exc).__name__
        rec["error"] = str(exc)
        rec["traceback"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    rec["seconds"] = round(time.monotonic() - t0, 4)
    return rec


def main(names):
    for name in names:
        _emit({"event": "start", "module": name})
        _emit(_probe(name))
    _emit({"event": "done"})
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
