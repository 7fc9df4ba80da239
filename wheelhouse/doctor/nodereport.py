"""One node's ``wh doctor --json`` report, read for ``wh doctor compare``: forgiving of what it lacks.

A report from an older or newer wh, or one missing an optional field or holding one of the wrong shape,
is read for what it has: a fact it does not record is ``None``, never an exception. Only a file that is
not a doctor report at all is :class:`BadReport` (bad input, named with a hint).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name

from wheelhouse.datafile import MAX_DEPTH, too_deep
from wheelhouse.progress import NullReporter, Reporter

__all__ = ["NodeReport", "BadReport", "load_report", "load_reports"]

_MAX_REPORT = 256 * 2**20  # a doctor report of a 200-package stack is well under 1 MiB

class BadReport(Exception):
    """A file that could not be read as a ``wh doctor --json`` report (bad input: exit 2)."""

    def __init__(self, file: str, reason: str, hint: str):
        super().__init__(f"{file}: {reason}")
        self.file, self.reason, self.hint = file, reason, hint

    def to_json(self) -> dict[str, str]:
        return {"file": self.file, "error": self.reason, "hint": self.hint}


@dataclass(frozen=True)
class NodeReport:
    """The comparable facts of one node's report; ``None`` where the report does not record a fact."""

    file: str
    node: str
    host: str | None
    wh_version: str | None
    exit_code: int | None
    facts: Mapping[str, str | None]  # "python", "machine", "glibc", "driver", "cuda", "GPU count", ...
    distributions: Mapping[str, tuple[str, str]] | None  # canonical name -> (name, version); None: not recorded
    files_sha256: Mapping[str, str | None] = field(default_factory=dict)
    wheel_sha256: Mapping[str, str | None] = field(default_factory=dict)
    checks: Mapping[str, str] = field(default_factory=dict)  # check id -> verdict
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "file": self.file, "host": self.host, "wh_version": self.wh_version,
                "exit_code": self.exit_code, "distributions": None if self.distributions is None else len(self.distributions),
                "notes": list(self.notes)}


# Not allowed in XML 1.0 (JUnit), or not encodable as UTF-8 (a lone surrogate JSON can spell): shown escaped.
_UNSAFE = re.compile("[^\t\n\r\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    """``text`` safe to print, to write as UTF-8 and to put in XML: other characters as ``\\xNN``/``\\uNNNN``."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}", text)


_BREAKS = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _str(v: Any) -> str | None:
    """A one-line fact (a node name, a version, a hash): also a line break is shown escaped, so a value can never
    print as a line of its own (``node-b\\nall nodes identical`` stays on its line)."""
    if not isinstance(v, (str, int, float)) or isinstance(v, bool) or str(v) == "":
        return None
    text = _clean(str(v))
    return text.translate(str.maketrans(_BREAKS)) if any(c in text for c in _BREAKS) else text


def _obj(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _mix(kinds: Counter) -> str:
    """``NVIDIA H200`` when every card is one kind (the count is ``GPU count``'s, said once); a mixed node names
    each kind's count: ``NVIDIA H200 x3 + NVIDIA L4 x1``."""
    if len(kinds) == 1:
        return next(iter(kinds))
    return " + ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "none"


def _gpu_facts(gpu: Mapping[str, Any]) -> dict[str, str | None]:
    if not gpu:
        keys = ("GPU query", "GPU count", "GPU model", "GPU sm", "interconnect")
        return dict.fromkeys(keys, None)
    cards = [_obj(g) for g in gpu.get("gpus") or [] if isinstance(g, Mapping)] if isinstance(gpu.get("gpus"), list) else []
    models = Counter(_str(g.get("name")) or "GPU" for g in cards)
    sms = Counter("sm_" + cc.replace(".", "") for g in cards for cc in [_str(g.get("compute_capability"))] if cc)
    return {
        "GPU query": f"failed: {gpu['error']}" if _str(gpu.get("error")) else "ok",
        "GPU count": str(len(cards)),
        "GPU model": _mix(models),
        "GPU sm": _mix(sms),
        "interconnect": _str(gpu.get("topology")) or ("none" if len(cards) < 2 else "unknown"),
    }


def _node_facts(data: Mapping[str, Any]) -> dict[str, str | None]:
    facts = _obj(data.get("facts"))
    interp = _obj(facts.get("interpreter"))
    gpu = _obj(facts.get("gpu"))
    impl, ver = _str(interp.get("implementation")), _str(interp.get("python_full_version"))
    return {
        "wh": _str(facts.get("wh_version")),
        "python": f"{impl or 'python'} {ver}" if ver else None,
        "machine": _str(interp.get("machine")),
        "glibc": _str(interp.get("glibc")),
        "driver": _str(gpu.get("driver_version")) if gpu else None,
        "cuda": _str(gpu.get("cuda_version")) if gpu else None,
        **_gpu_facts(gpu),
    }


def _inventory(facts: Mapping[str, Any]):
    installed = facts.get("installed")
    if not isinstance(installed, list):
        return None, {}, {}
    dists, files, wheels = {}, {}, {}
    for entry in installed:
        d = _obj(entry)
        name = _str(d.get("name"))
        if not name:
            continue
        key = canonicalize_name(name)
        version, tree, wheel = _str(d.get("version")) or "?", _str(d.get("files_sha256")), _str(d.get("wheel_sha256"))
        if key in dists:  # two copies installed (two dist-info folders): both are shown, neither hidden
            dists[key] = (dists[key][0], _joined(dists[key][1], version))
            files[key], wheels[key] = _joined(files[key], tree), _joined(wheels[key], wheel)
            continue
        dists[key] = (name, version)
        files[key] = tree
        wheels[key] = wheel
    return dists, files, wheels


def _joined(first: str | None, second: str | None) -> str | None:
    """One value for a distribution listed twice: ``a + b`` where the copies differ."""
    if first == second:
        return first
    return f"{first or '-'} + {second or '-'}"


def _checks(data: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for r in data.get("results") or []:
        rid, verdict = _str(_obj(r).get("id")), _str(_obj(r).get("verdict"))
        if rid and verdict and rid not in out:
            out[rid] = verdict
    return out


_SCALAR = (str, int, float, type(None))


def _type_problems(data: Mapping[str, Any]) -> list[str]:
    """Each field compare reads whose type is not the one the doctor writes, by name (``results[0].verdict must
    be a string``): a wrong type is refused, never read as "not recorded" (which could hide a difference)."""
    out = []

    def want(value: Any, kinds: tuple[type, ...], where: str, what: str) -> bool:
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            out.append(f"{where} must be {what}, not {type(value).__name__}")
            return False
        return value is not None

    for i, r in enumerate(data.get("results") or []):
        if want(r, (dict,), f"results[{i}]", "an object"):
            want(r.get("id"), (str,), f"results[{i}].id", "a string")
            want(r.get("verdict"), (str,), f"results[{i}].verdict", "a string")
    facts = data.get("facts")
    if not want(facts, (dict,), "facts", "an object"):
        return out
    for key in ("node", "interpreter", "gpu"):
        want(facts.get(key), (dict,), f"facts.{key}", "an object")
    if isinstance(facts.get("node"), dict):
        for key in ("name", "host"):
            want(facts["node"].get(key), (str,), f"facts.node.{key}", "a string")
    if want(facts.get("installed"), (list,), "facts.installed", "a list"):
        for i, d in enumerate(facts["installed"]):
            if want(d, (dict,), f"facts.installed[{i}]", "an object"):
                for key in ("name", "version", "files_sha256", "wheel_sha256"):
                    want(d.get(key), (str,), f"facts.installed[{i}].{key}", "a string")
    return out


def _parse(file: str, data: Any) -> NodeReport:
    if not isinstance(data, Mapping) or data.get("tool") != "wh doctor" or not isinstance(data.get("results"), list):
        what = "a JSON object" if isinstance(data, Mapping) else f"JSON {type(data).__name__}"
        if isinstance(data, Mapping) and data.get("tool") == "wh doctor compare":
            what = "a `wh doctor compare --json` output"
        raise BadReport(file, f"not a `wh doctor --json` report ({what} without tool = \"wh doctor\" and results)",
                        "give the files `wh doctor --json > FILE` wrote on each node")
    wrong = _type_problems(data)
    if wrong:
        raise BadReport(file, f"not a `wh doctor --json` report: {'; '.join(wrong[:3])}",
                        "give the files `wh doctor --json > FILE` wrote on each node (this one was edited or forged)")
    facts = _obj(data.get("facts"))
    node = _obj(facts.get("node"))
    host = _str(data.get("host"))
    notes = []
    schema = data.get("schema_version")
    if isinstance(schema, int) and schema > 1:
        notes.append(f"schema_version {schema} is newer than this wh reads (1): compared on the fields it knows")
    dists, files, wheels = _inventory(facts)
    if dists is None:
        notes.append("no list of installed distributions (a report from a wh older than `wh doctor compare`)")
    code = data.get("exit_code")
    return NodeReport(
        file=file, node=_str(node.get("name")) or host or Path(file).stem, host=_str(node.get("host")) or host,
        wh_version=_str(facts.get("wh_version")), exit_code=code if isinstance(code, int) else None,
        facts=_node_facts(data), distributions=dists, files_sha256=files, wheel_sha256=wheels, checks=_checks(data),
        notes=tuple(notes))


def load_report(path: str | Path) -> NodeReport:
    """One node's report; :class:`BadReport` names the file and says what to do when it is not one."""
    file = _clean(str(path))  # a name with undecodable bytes (surrogate-escaped) is shown, never a crash
    rerun = "re-run `wh doctor --json > FILE` on that node (its stderr says why it wrote nothing)"
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_MAX_REPORT + 1)
    except IsADirectoryError:
        raise BadReport(file, "is a folder", "give the report files: `wh doctor compare reports/*.json`") from None
    except OSError as exc:
        raise BadReport(file, f"cannot read it ({exc.strerror or exc})",
                        "check the path; under Slurm or Kubernetes, that the node wrote its report there") from None
    if len(raw) > _MAX_REPORT:
        raise BadReport(file, f"larger than {_MAX_REPORT // 2**20} MiB: not a doctor report", "give the .json reports only")
    if not raw.strip():
        raise BadReport(file, "is empty: the doctor wrote no report there", rerun)
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise BadReport(file, f"nests deeper than a doctor report does (more than {MAX_DEPTH} levels)",
                        rerun) from None
    except (UnicodeDecodeError, ValueError) as exc:
        first = raw.lstrip()[:1]
        why = ("JSON followed by other output (stderr, or another node's report, in the same file?)" if first == b"{"
               else "not JSON (an error message or a log?)")
        raise BadReport(file, f"{why}: {str(exc)[:120]}",
                        "one node's stdout alone per file: `wh doctor --json > FILE 2> FILE.log` "
                        "(under srun: --output='reports/%N.json' --error='reports/%N.log')") from None
    if too_deep(data):
        raise BadReport(file, f"nests deeper than a doctor report does (more than {MAX_DEPTH} levels)", rerun)
    try:
        return _parse(file, data)
    except BadReport:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed report is bad input, never a crash of compare
        raise BadReport(file, f"malformed doctor report: {type(exc).__name__}: {exc}", rerun) from None


def load_reports(paths: Sequence[str | Path], reporter: Reporter = NullReporter()) -> tuple[list[NodeReport], list[BadReport]]:
    """Every readable report, and every file that was not one (each named), in the order given."""
    good, bad = [], []
    task = "reading doctor reports"
    reporter.start(task, total=len(paths), unit="reports")
    seen: set[tuple[int, int]] = set()  # (device, inode) of each report read: a file given twice is one node
    for p in paths:
        try:
            st = os.stat(p)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = None  # load_report names why it cannot be read
        try:
            if key in seen:
                raise BadReport(str(p), "is a report given twice (one node compared with itself is no comparison)",
                                "give each node's report once: `wh doctor compare reports/*.json`")
            if key is not None:
                seen.add(key)
            good.append(load_report(p))
        except BadReport as exc:
            bad.append(exc)
        reporter.advance(task)
    reporter.finish(task)
    return good, bad
