"""Console-script launchers and ``#!python`` rewrites for the receiving interpreter.

A wheel's ``entry_points.txt`` names console and GUI scripts; each becomes a small
Python file in the scheme's ``scripts`` folder whose first line runs the receiving
interpreter (not the one running wh).
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from packaging.utils import canonicalize_name

from .record import UnsafeWheelPath

__all__ = ["shebang", "console_launchers", "check_script_name", "protected_script"]

# What a venv's bin/ holds that no wheel may replace: the interpreter under each of its names, the
# activation scripts, and wh's own snippets. pip's own wheel legitimately ships pip, pip3, pip3.X.
_INTERPRETER = re.compile(r"^(python|pythonw|pypy|graalpy)(\d+(\.\d+)?t?)?$")
_PIP = re.compile(r"^pip(\d+(\.\d+)?)?$")
_VENV = re.compile(r"^(activate([._].*)?|Activate\.ps1|deactivate(\..*)?|wh-env\..*)$", re.IGNORECASE)
# The entry point spec's object reference: dotted names, module then attribute (packaging.python.org,
# "Entry points specification"); anything else would be spliced into the launcher as code.
_DOTTED = re.compile(r"^[^\W\d]\w*(\.[^\W\d]\w*)*\Z")

_LAUNCHER = """# -*- coding: utf-8 -*-
import sys
from {module} import {head}
if __name__ == "__main__":
    sys.exit({call}())
"""


def shebang(python: str) -> bytes:
    """The first line(s) of a script run by ``python``."""
    if len(python) < 127 and " " not in python:
        return f"#!{python}\n".encode()
    # Long or spaced paths: let sh find the interpreter (the kernel limits #! lines).
    return f"#!/bin/sh\n'''exec' '{python}' \"$0\" \"$@\"\n' '''\n".encode()


def protected_script(script: str, dist: str | None = None) -> str | None:
    """Why ``script`` (a name in the scripts folder) is not ``dist``'s to write or remove, or None.

    The interpreter under each of its names and the activation scripts belong to the venv; the
    pip scripts to pip.
    """
    if _INTERPRETER.match(script):
        return "would replace the environment's interpreter"
    if _VENV.match(script):
        return "would replace the environment's activation script"
    if script == "pyvenv.cfg":  # Python reads it beside its executable too: which interpreter the venv is
        return "would replace the environment's pyvenv.cfg"
    if _PIP.match(script) and (dist is None or canonicalize_name(dist) != "pip"):
        return "would replace the environment's pip"
    return None


def check_script_name(wheel: Path, dist: str, script: str) -> None:
    """Raise UnsafeWheelPath for a script that would replace the interpreter, pip or an activation script."""
    if script in ("", ".", "..") or "/" in script or "\\" in script or "\x00" in script \
            or len(script.encode("utf-8", "surrogateescape")) > 255:  # NAME_MAX: no file has that name
        bad = "is not a file name"
    else:
        bad = protected_script(script, dist)
    if bad is None:
        return
    raise UnsafeWheelPath(f"{wheel.name}: script {script!r} {bad}",
                          hint="remove this wheel from the wheelhouse and re-run `wh stage`")


def console_launchers(entry_points: str | None) -> list[tuple[str, str]]:
    """``(script name, launcher body without shebang)`` for each console/GUI script of ``entry_points``."""
    if not entry_points:
        return []
    cp = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    cp.optionxform = str  # type: ignore[assignment]
    try:
        cp.read_string(entry_points)
    except configparser.Error:
        return []
    out = []
    for group in ("console_scripts", "gui_scripts"):
        if not cp.has_section(group):
            continue
        for script, ref in cp.items(group):
            ref = ref.split("[", 1)[0].strip()
            module, _, attr = (part.strip() for part in ref.partition(":"))
            # A name with "/" (``../evil``, ``sub/dir``) names no file in the scripts folder: kept, so that
            # check_script_name refuses the wheel (skipping it would install a distribution missing a script).
            if not _DOTTED.match(module) or not _DOTTED.match(attr):
                continue
            out.append((script.strip(), _LAUNCHER.format(module=module, head=attr.split(".")[0], call=attr)))
    return out
