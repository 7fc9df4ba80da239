"""What a delta wheelhouse assumed the box's image provides, checked before anything is written.

``wh stage --target PROFILE`` leaves out what the captured image already ships (torch,
numpy, ...) and records it in ``wh.json`` as ``assumed_present``: ``[{"name", "version"}]``.
Those wheels are not in the wheelhouse, so the install is only complete when the receiving
interpreter still imports every one of them at exactly that version. This is asked of the
interpreter itself (``target.installed``, the one view of "installed": first copy of a name on
its ``sys.path`` wins). For a venv still to be created with ``--system-site-packages``, it is
asked of a throwaway venv made the same way in a temporary folder, so the answer is what the
new venv will see (the base's site folders, a parent venv's through wh's ``.pth``, no user
site). A plain new venv sees nothing of the image: a delta is refused there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelhouse.errors import UsageError
from wheelhouse.target.interpreter import Interpreter, create_venv
from .closure import installed_view

__all__ = ["AssumedNotProvided", "BadAssumedList", "assumed_present", "check_assumed"]

_HINT = ("install with the image's own interpreter (`--python PATH`, plus `--system-site-packages` for a new "
         "venv); if the image changed, capture its profile again on the box (`python capture_target.py -o FILE` "
         "with that interpreter) and re-stage with `wh stage --target FILE`, or stage everything with "
         "`wh stage --full`")


class AssumedNotProvided(UsageError):
    """The box no longer imports what a delta wheelhouse left out as already there."""

    code = "image-changed"


class BadAssumedList(UsageError):
    code = "bad-wheelhouse"


def assumed_present(meta: Mapping[str, Any], where: str) -> dict[str, str]:
    """``wh.json``'s ``assumed_present`` as {canonical name: version}; empty for a full wheelhouse."""
    rows = meta.get("assumed_present") or []
    hint = "the wheelhouse's wh.json was edited or damaged: stage it again with `wh stage`"
    if not isinstance(rows, list):
        raise BadAssumedList(f"{where}: assumed_present must be a list of {{name, version}} objects", hint=hint)
    out: dict[str, str] = {}
    for i, row in enumerate(rows):
        if not (isinstance(row, Mapping) and isinstance(row.get("name"), str) and row["name"].strip()
                and isinstance(row.get("version"), str) and row["version"].strip()):
            raise BadAssumedList(f"{where}: assumed_present[{i}] must be an object with a name and a version, "
                                 f"not {row!r}", hint=hint)
        out[canonicalize_name(row["name"])] = row["version"].strip()
    return out


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)  # 2.11.0+cu130 == 2.11.0+cu130, != 2.11.0
    except InvalidVersion:
        return a == b


def _differences(assumed: Mapping[str, str], view: Mapping[str, Any], incoming: Mapping[str, str]) -> list[str]:
    out = []
    for name, version in sorted(assumed.items()):
        have = view.get(name)
        if name in incoming and not _same_version(incoming[name], version):  # the box has it until this install
            out.append(f"{name}: wheelhouse assumed {version}, this install would replace it with {incoming[name]}")
        elif have is None:
            out.append(f"{name}: wheelhouse assumed {version}, missing on the box")
        elif not _same_version(have.version, version):
            out.append(f"{name}: wheelhouse assumed {version}, the box has {have.version}")
    return out


def _view(interp: Interpreter, existing: bool) -> Mapping[str, Any]:
    """What the receiving environment imports (or, for a venv to be made with --system-site-packages, will)."""
    if existing:
        return installed_view(interp.executable)
    with tempfile.TemporaryDirectory(prefix="wh-assumed-") as tmp:
        probe = create_venv(Path(tmp) / "venv", python=interp.executable, system_site_packages=True, base=interp)
        return installed_view(probe.executable)


def check_assumed(houses, interp: Interpreter, *, existing: bool, system_site_packages: bool,
                  incoming: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Refuse (``AssumedNotProvided``) when the receiving interpreter no longer provides, at the same version,
    every distribution a delta wheelhouse in ``houses`` assumed present, or when ``incoming`` (the (name,
    version) this install writes, from any wheelhouse) replaces one; a note saying what was found otherwise.
    Nothing in the target environment is written."""
    writes = {canonicalize_name(n): v for n, v in incoming}
    wanted: list[tuple[Any, dict[str, str]]] = [(h, assumed_present(h.meta, f"{h.path / 'wh.json'}"))
                                                for h in houses]
    wanted = [(h, a) for h, a in wanted if a]
    if not wanted:
        return []
    count = sum(len(a) for _, a in wanted)
    if not existing and not system_site_packages:
        names = sorted({n for _, a in wanted for n in a})
        listed = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        verb = "is a delta that assumes" if len(wanted) == 1 else "are deltas that assume"
        raise AssumedNotProvided(
            f"{_label(wanted)} {verb} {count} distribution(s) from the box's image ({listed}), "
            "but a new venv without --system-site-packages sees nothing of the image; nothing was installed",
            hint="install with `wh install WHEELHOUSE --venv VENV --system-site-packages` (or `--python` the image's "
                 "interpreter), or stage everything with `wh stage --full`")
    view = _view(interp, existing)
    seen_by = interp.executable if existing else f"a new venv of {interp.executable} with --system-site-packages"
    problems = [line + (f" [{h.path}]" if len(wanted) > 1 else "")
                for h, a in wanted for line in _differences(a, view, writes)]
    if problems:
        raise AssumedNotProvided(
            f"the box ({seen_by}) does not provide {len(problems)} of the {count} distribution(s) {_label(wanted)} "
            "assumed present, nothing was installed: " + "; ".join(problems[:4])
            + (f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""),
            hint=_HINT, detail="\n".join(problems))
    return [f"the image provides all {count} distribution(s) {_label(wanted)} assumed present"]


def _label(wanted: Sequence[tuple[Any, Mapping[str, str]]]) -> str:
    return f"wheelhouse {wanted[0][0].path}" if len(wanted) == 1 else f"{len(wanted)} wheelhouses"
