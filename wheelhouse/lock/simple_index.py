"""A static PEP 503 index over a folder of wheels, so pip and uv can use ``--index-url file://.../simple``.

Pages link to the wheels with relative URLs (``../../wheels/<file>#sha256=...``)
so the wheelhouse can be moved or mounted anywhere. ``data-requires-python``
(PEP 503, HTML-escaped) lets an installer skip a wheel its interpreter cannot
use without opening it.
"""

from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from packaging.utils import canonicalize_name

from wheelhouse.atomic import write_atomic

__all__ = ["IndexEntry", "render_project_page", "render_root_page", "write_simple_index"]


@dataclass(frozen=True)
class IndexEntry:
    """One wheel to list: its project, file name, sha256 and Requires-Python."""

    name: str
    filename: str
    sha256: str
    requires_python: str | None = None


def render_project_page(project: str, entries: Iterable[IndexEntry], wheels_rel: str) -> str:
    """The PEP 503 page of one project; links are relative to ``simple/<project>/``."""
    rows = []
    for e in sorted(entries, key=lambda e: e.filename):
        attrs = f'href="{html.escape(f"{wheels_rel}/{e.filename}#sha256={e.sha256}")}"'
        if e.requires_python:
            attrs += f' data-requires-python="{html.escape(e.requires_python)}"'
        rows.append(f"    <a {attrs}>{html.escape(e.filename)}</a><br/>")
    title = html.escape(project)
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.0\">\n"
        f"    <title>Links for {title}</title>\n  </head>\n  <body>\n    <h1>Links for {title}</h1>\n"
        + "\n".join(rows)
        + "\n  </body>\n</html>\n"
    )


def render_root_page(projects: Iterable[str]) -> str:
    rows = [f'    <a href="{html.escape(p)}/">{html.escape(p)}</a><br/>' for p in sorted(projects)]
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.0\">\n"
        "    <title>Simple index</title>\n  </head>\n  <body>\n" + "\n".join(rows) + "\n  </body>\n</html>\n"
    )


def write_simple_index(simple_dir: Path, entries: Iterable[IndexEntry], wheels_rel: str = "../../wheels") -> list[Path]:
    """Write ``simple_dir/index.html`` and one ``simple_dir/<project>/index.html`` per project.

    ``wheels_rel`` is the wheels folder as seen from a project page. Returns the
    files written. The caller owns the folder (stage writes it into a fresh tree).
    """
    by_project: dict[str, list[IndexEntry]] = defaultdict(list)
    for e in entries:
        by_project[canonicalize_name(e.name)].append(e)
    simple_dir = Path(simple_dir)
    written = [write_atomic(simple_dir / "index.html", render_root_page(by_project))]
    for project, files in by_project.items():
        written.append(write_atomic(simple_dir / project / "index.html", render_project_page(project, files, wheels_rel)))
    return written
