"""``wh doctor compare``: many nodes' doctor reports, one answer: what differs between them.

Each node runs ``wh doctor --json`` (one ``srun`` per node, a Kubernetes Job or DaemonSet); this module
reads those reports and says, aspect by aspect (driver, CUDA, GPUs, installed distributions and their
hashes, link state, check verdicts), which nodes hold which value: the majority first, then the outliers.

Reading is forgiving by design (``nodereport``): a report from an older or newer wh, or one missing an
optional field, is compared on what it has and says what it lacks; a file that is not a doctor report at
all is named as bad input (:class:`BadReport`), and the other reports are still compared. Nothing here
raises on the contents of a report: losing the JSON or the JUnit to a crash would be worse than any
difference.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name

from .nodereport import BadReport, NodeReport, load_report, load_reports

__all__ = ["ASPECTS", "NodeReport", "BadReport", "Difference", "Comparison", "load_report", "load_reports",
           "compare_reports", "render_lines", "render_junit", "NOT_RECORDED"]

# Every aspect compared, in the order it is printed; each is one JUnit testcase.
ASPECTS: tuple[str, ...] = ("wh", "python", "driver", "cuda", "gpus", "distributions", "hashes", "links", "checks")
NOT_RECORDED = "not recorded"
_NAMED = 8  # node names shown per group before "and N more"

@dataclass(frozen=True)
class Difference:
    """One fact that is not the same on every node: its values, each with the nodes holding it (majority first)."""

    aspect: str
    key: str
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # (value, nodes)

    @property
    def outliers(self) -> tuple[str, ...]:
        """The nodes not holding the majority's value; none when no value has a majority (a 1:1 split)."""
        if len(self.groups) > 1 and len(self.groups[0][1]) == len(self.groups[1][1]):
            return ()
        return tuple(n for _, nodes in self.groups[1:] for n in nodes)

    @property
    def line(self) -> str:
        """``numpy: 2.1.3 on node-a, node-b; 2.2.0 on node-c``."""
        return f"{self.key}: " + "; ".join(f"{v} on {_names(nodes, i == 0)}" for i, (v, nodes) in enumerate(self.groups))

    def to_json(self) -> dict[str, Any]:
        return {"aspect": self.aspect, "key": self.key, "line": self.line,
                "groups": [{"value": v, "nodes": list(n)} for v, n in self.groups]}


@dataclass(frozen=True)
class Comparison:
    nodes: tuple[NodeReport, ...]
    differences: tuple[Difference, ...]
    bad: tuple[BadReport, ...] = ()
    not_compared: Mapping[str, str] = field(default_factory=dict)  # aspect -> why
    failing_everywhere: tuple[str, ...] = ()  # check ids failing on every node (the same everywhere)
    expected: int | None = None  # --expect N
    distinct: int | None = None  # how many nodes the reports name (two reports may name one node)
    started: float = field(default_factory=time.time)

    @property
    def count_mismatch(self) -> bool:
        """``--expect N`` was given and there are not N readable reports (a node wrote none, or a stale one is there)."""
        named = len(self.nodes) if self.distinct is None else self.distinct
        return self.expected is not None and named + len(self.bad) != self.expected

    @property
    def identical(self) -> bool:
        return not self.differences and not self.count_mismatch

    def exit_code(self) -> int:
        """2 bad input (a file named that is not a readable report, or a single report without ``--expect``);
        1 the nodes differ (or not as many reports as ``--expect`` says); 0 identical."""
        if self.bad or (self.expected is None and len(self.nodes) < 2):
            return 2
        if not self.identical:
            return 1
        return 0

    def by_aspect(self, aspect: str) -> list[Difference]:
        return [d for d in self.differences if d.aspect == aspect]

    def outlier_nodes(self) -> dict[str, list[str]]:
        """node -> the keys in which it is not with the majority."""
        out: dict[str, list[str]] = {}
        for d in self.differences:
            for n in d.outliers:
                out.setdefault(n, []).append(d.key)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1, "tool": "wh doctor compare",
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "identical": self.exit_code() == 0, "exit_code": self.exit_code(),  # never true beside exit 2
            "nodes": [n.to_json() for n in self.nodes],
            "expected_nodes": self.expected, "node_count_mismatch": self.count_mismatch,
            "bad_inputs": [b.to_json() for b in self.bad],
            "aspects": {a: ("differs" if self.by_aspect(a) else "not compared" if a in self.not_compared else "same")
                        for a in ASPECTS},
            "not_compared": dict(self.not_compared),
            "differences": [d.to_json() for d in self.differences],
            "outliers": self.outlier_nodes(),
            "failing_everywhere": list(self.failing_everywhere),
        }


def _names(nodes: Sequence[str], majority: bool) -> str:
    if majority and len(nodes) > _NAMED:
        return f"{len(nodes)} nodes"
    shown = list(nodes[:_NAMED])
    more = len(nodes) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


_FACT_ASPECT = {"wh": "wh", "python": "python", "machine": "python", "glibc": "python", "driver": "driver",
                "cuda": "cuda", "GPU query": "gpus", "GPU count": "gpus", "GPU model": "gpus", "GPU sm": "gpus",
                "interconnect": "gpus"}


# ---- comparing ------------------------------------------------------------------------------------------


def _labelled(nodes: Sequence[NodeReport]) -> list[NodeReport]:
    """Node names are unique labels: two reports naming the same node get their file name beside it."""
    count = Counter(n.node for n in nodes)
    out = []
    for n in nodes:
        if count[n.node] > 1:
            n = NodeReport(**{**n.__dict__, "node": f"{n.node} ({n.file})",
                              "notes": n.notes + (f"another report also names node {n.node}",)})
        out.append(n)
    return out


def _difference(aspect: str, key: str, values: Mapping[str, str]) -> Difference | None:
    """``values``: node -> value, in node order. None when every node holds the same value."""
    by_value: dict[str, list[str]] = {}
    for node, v in values.items():
        by_value.setdefault(v, []).append(node)
    if len(by_value) < 2:
        return None
    # The majority first; a tie keeps the order the first node of each group was given in.
    groups = sorted(by_value.items(), key=lambda kv: -len(kv[1]))
    return Difference(aspect, key, tuple((v, tuple(n)) for v, n in groups))


def _facts_differences(nodes: Sequence[NodeReport]) -> list[Difference]:
    out = []
    for key, aspect in _FACT_ASPECT.items():
        d = _difference(aspect, key, {n.node: n.facts.get(key) or NOT_RECORDED for n in nodes})
        if d:
            out.append(d)
    return out


def _dist_differences(nodes: Sequence[NodeReport]) -> list[Difference]:
    with_inv = [n for n in nodes if n.distributions is not None]
    out = []
    if with_inv and len(with_inv) < len(nodes):
        values = {n.node: "recorded" if n.distributions is not None else f"{NOT_RECORDED} (older wh doctor)" for n in nodes}
        out.append(_difference("distributions", "installed distributions", values))
    keys = sorted({k for n in with_inv for k in n.distributions})
    for k in keys:
        name = next(n.distributions[k][0] for n in with_inv if k in n.distributions)
        d = _difference("distributions", name, {n.node: n.distributions[k][1] if k in n.distributions else "not installed"
                                                for n in with_inv})
        if d:
            out.append(d)
            continue
        # Same version everywhere: are they the same files, from the same wheel?
        for label, table in (("files", "files_sha256"), ("wheel", "wheel_sha256")):
            hashes = {n.node: getattr(n, table).get(k) for n in with_inv}
            if label == "wheel" and not all(hashes.values()):
                continue  # a wheel hash is known only where wh installed it: files_sha256 speaks for the rest
            full, cut = {h for h in hashes.values() if h}, 12  # shown short, never so short two hashes look one

            def short(h: str, cut: int) -> str:  # a distribution listed twice on a node: "a + b", each cut
                return " + ".join(part[:cut] for part in h.split(" + "))

            while len({short(h, cut) for h in full}) < len(full):
                cut += 4
            shown = {node: f"sha256 {short(h, cut)}" if h else "no RECORD" for node, h in hashes.items()}
            d = _difference("hashes", f"{name} {with_inv[0].distributions[k][1]} {label}", shown)
            if d:
                out.append(d)
    return out


def _check_differences(nodes: Sequence[NodeReport]) -> tuple[list[Difference], list[str]]:
    ids = list(dict.fromkeys(i for n in nodes for i in n.checks))
    out, everywhere = [], []
    for cid in ids:
        aspect = "links" if cid.startswith("links:") else "checks"
        have = {n.node: n.checks[cid] for n in nodes if cid in n.checks}
        if cid.startswith("native:") and len(set(have.values())) == 1:
            # A native check exists only where its distribution is installed; that difference is named once,
            # under distributions, not again here.
            dist = canonicalize_name(cid.split(":", 1)[1])
            if all(n.distributions is not None and dist not in n.distributions for n in nodes if cid not in n.checks):
                continue
        d = _difference(aspect, cid, {n.node: n.checks.get(cid, "not run") for n in nodes})
        if d:
            out.append(d)
        elif have and set(have.values()) <= {"fail", "error"}:
            everywhere.append(cid)
    return out, everywhere


def compare_reports(nodes: Sequence[NodeReport], bad: Sequence[BadReport] = (), expected: int | None = None) -> Comparison:
    """What differs between ``nodes``: every aspect of :data:`ASPECTS`, majority first."""
    distinct = len({n.node for n in nodes})
    nodes = _labelled(nodes)
    not_compared: dict[str, str] = {}
    if len(nodes) < 2:
        why = f"{len(nodes)} readable report(s): nothing to compare with"
        return Comparison(tuple(nodes), (), tuple(bad), dict.fromkeys(ASPECTS, why), (), expected, distinct)
    diffs = _facts_differences(nodes) + _dist_differences(nodes)
    checks, everywhere = _check_differences(nodes)
    diffs += checks
    if all(n.distributions is None for n in nodes):
        not_compared["distributions"] = not_compared["hashes"] = \
            "no report lists installed distributions (written by a wh older than `wh doctor compare`)"
    if not any(n.checks.get(c) for n in nodes for c in n.checks if c.startswith("links:")):
        not_compared["links"] = "no report ran the links checks"
    for aspect in ("wh", "python", "driver", "cuda", "gpus"):  # recorded nowhere: not seen to agree
        keys = [k for k, a in _FACT_ASPECT.items() if a == aspect]
        if not any(n.facts.get(k) for n in nodes for k in keys):
            not_compared[aspect] = "no report records it"
    order = {a: i for i, a in enumerate(ASPECTS)}
    diffs.sort(key=lambda d: order[d.aspect])  # stable: keys keep their order inside an aspect
    return Comparison(tuple(nodes), tuple(diffs), tuple(bad), not_compared, tuple(everywhere), expected, distinct)


# ---- renderings -------------------------------------------------------------------------------------------


def _count(c: Comparison) -> str:
    """``3 report(s) naming 2 node(s) for 3 expected node(s)``."""
    naming = f" naming {c.distinct} node(s)" if c.distinct is not None and c.distinct != len(c.nodes) else ""
    return f"{len(c.nodes) + len(c.bad)} report(s){naming} for {c.expected} expected node(s)"


def render_lines(c: Comparison) -> list[str]:
    """The comparison for people (and CI logs): one line per difference, then a summary.

    Bad inputs are not among these lines: the CLI shows each as an error with its hint (stderr)."""
    lines = [f"wh doctor compare: {len(c.nodes)} node(s): {_names([n.node for n in c.nodes], False)}"]
    for n in c.nodes:
        lines += [f"note: {n.node} ({n.file}): {note}" for note in n.notes]
    if c.count_mismatch:
        lines.append(f"nodes: {_count(c)} (--expect)")
    elif c.expected is None and len(c.nodes) + len(c.bad) < 2:
        lines.append("nodes: one report alone compares with nothing: give every node's report "
                     "(or --expect 1 for a one-node fleet)")
    lines += [d.line for d in c.differences]
    lines += [f"failing on every node: {cid}" for cid in c.failing_everywhere]
    same = [a for a in ASPECTS if not c.by_aspect(a) and a not in c.not_compared]
    for a, why in c.not_compared.items():
        if a in ASPECTS and not c.by_aspect(a):
            lines.append(f"not compared: {a}: {why}")
    for node, keys in c.outlier_nodes().items():
        lines.append(f"outlier: {node} differs from the majority in {len(keys)}: {', '.join(keys)}")
    if len(c.nodes) >= 2:
        verdict = "identical" if c.identical else f"{len(c.differences)} difference(s)"
        lines.append(f"{verdict}; same on every node: {', '.join(same) or 'nothing'}")
    return lines


def render_junit(c: Comparison) -> str:
    """JUnit XML: one testcase per aspect (a difference is a failure), one for the inputs, one for --expect."""
    cases: list[tuple[str, str, str, str]] = []  # (name, kind, message, body); kind: ok/failure/error/skipped
    if c.bad:
        cases.append(("inputs", "error", f"{len(c.bad)} file(s) are not readable doctor reports: "
                      + ", ".join(b.file for b in c.bad), "\n".join(f"{b.file}: {b.reason}\nhint: {b.hint}" for b in c.bad)))
    else:
        cases.append(("inputs", "ok", "", "\n".join(f"{n.node}: {n.file}" for n in c.nodes)))
    if c.expected is not None:
        msg = _count(c)
        cases.append(("nodes", "failure" if c.count_mismatch else "ok", msg, msg))
    for a in ASPECTS:
        diffs = c.by_aspect(a)
        if diffs:
            cases.append((a, "failure", diffs[0].line if len(diffs) == 1 else f"{len(diffs)} differences: {diffs[0].line}",
                          "\n".join(d.line for d in diffs)))
        elif a in c.not_compared:
            cases.append((a, "skipped", c.not_compared[a], ""))
        else:
            cases.append((a, "ok", "", f"same on {len(c.nodes)} node(s)"))
    suite = ET.Element("testsuite", {
        "name": "wh doctor compare", "tests": str(len(cases)),
        "failures": str(sum(1 for x in cases if x[1] == "failure")),
        "errors": str(sum(1 for x in cases if x[1] == "error")),
        "skipped": str(sum(1 for x in cases if x[1] == "skipped")),
        "time": "0.000", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(c.started)),
    })
    props = ET.SubElement(suite, "properties")
    for n in c.nodes:
        ET.SubElement(props, "property", {"name": f"node:{n.node}", "value": n.file})
    for name, kind, message, body in cases:
        case = ET.SubElement(suite, "testcase", {"classname": "wh.doctor.compare", "name": name, "time": "0.000"})
        if kind in ("failure", "error"):
            ET.SubElement(case, kind, {"message": message, "type": "differs" if kind == "failure" else "bad-input"}).text = body
        elif kind == "skipped":
            ET.SubElement(case, "skipped", {"message": message})
        else:
            ET.SubElement(case, "system-out").text = body
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
