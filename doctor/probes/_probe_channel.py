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
import sys
import traceback

__all__ = ["MARKER", "emit", "error_record"]

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
