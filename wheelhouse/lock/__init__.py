"""The wheelhouse on disk: ``pylock.toml`` (PEP 751) and ``wh.json`` (provenance).

Both files are read and written in ``files`` (whose docstring has the folder's layout): ``Lock`` and
``LockedFile`` are ``pylock.toml``'s model, read purely (``parse_pylock(text)``) or from a folder
(``read_pylock``); ``wh.json`` is read with its types checked (``read_wh_json``). The wheelhouse's
writer is ``writer``, its static index ``simple_index``, the RECORD check ``records``.
"""

from __future__ import annotations

from .files import (PYLOCK, WH_JSON, WH_JSON_SCHEMA, Lock, LockedFile, LockError, WheelhouseNotFound, parse_pylock,
                    read_pylock, read_wh_json, render_pylock, wh_json_type_problems, write_pylock, write_wh_json)

__all__ = [
    "LockedFile",
    "Lock",
    "WheelhouseNotFound",
    "LockError",
    "PYLOCK",
    "WH_JSON",
    "WH_JSON_SCHEMA",
    "parse_pylock",
    "render_pylock",
    "read_pylock",
    "write_pylock",
    "read_wh_json",
    "wh_json_type_problems",
    "write_wh_json",
]
