"""JSON release manifests: extra wheels an engine publishes beside its release, with their sha256.

The engine's nightly ``engine-linux_x86_64.json`` looks like::

    {"runtime":      {"name": "freetoken-...whl", "url": "https://...", "sha256": "..."},
     "kernel_cache": {"name": "...whl", "url": "...", "sha256": "..."}}

A stack manifest names it with ``[[manifest]] url = ... keys = ["runtime", "kernel_cache"]``.
Each named entry is downloaded through the verified fetch (its sha256 checked
before it gets its name), then handed to the resolver as a local wheel pinned
``==`` its version, so its own dependencies are resolved for the target like
any other requirement.
"""

from __future__ import annotations

import hashlib
import html
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from wheelhouse.datafile import parse_json
from wheelhouse.errors import WhError
from wheelhouse.fetch import FetchItem, fetch_all
from wheelhouse.index.http import HttpClient, HttpError
from wheelhouse.manifest import ReleaseManifest
from wheelhouse.progress import NullReporter, Reporter

__all__ = [
    "ReleaseError",
    "ReleaseArtifact",
    "parse_release",
    "load_release",
    "load_releases",
    "release_links_page",
    "fetch_release_artifacts",
]


class ReleaseError(WhError):
    code = "bad-release-manifest"


@dataclass(frozen=True)
class ReleaseArtifact:
    """One wheel named by a release manifest."""

    key: str  # "runtime"
    filename: str
    url: str
    sha256: str
    project: str  # normalized name from the wheel file name
    version: str
    manifest_url: str
    size: int | None = None

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"

    def fetch_item(self) -> FetchItem:
        return FetchItem(self.url, self.filename, self.sha256, self.size)


def parse_release(data: object, release: ReleaseManifest, origin: str | None = None) -> list[ReleaseArtifact]:
    """The artifacts under ``release.keys`` of a parsed release manifest; every problem names the key."""
    where = origin or release.url
    if not isinstance(data, dict):
        raise ReleaseError(f"release manifest {where} is not a JSON object", hint="check [[manifest]] url in the stack manifest")
    keys = release.keys or tuple(k for k, v in data.items() if isinstance(v, dict) and "sha256" in v)
    if not keys:
        raise ReleaseError(f"release manifest {where} has no entries with a sha256", hint="name the entries with keys = [...]")
    out = []
    for key in keys:
        entry = data.get(key)
        if not isinstance(entry, dict):
            have = ", ".join(sorted(k for k, v in data.items() if isinstance(v, dict))) or "none"
            raise ReleaseError(f"release manifest {where} has no entry {key!r} (it has: {have})",
                               hint="fix keys = [...] in the stack manifest's [[manifest]]")
        missing = [f for f in ("name", "url", "sha256") if not entry.get(f)]
        if missing:
            raise ReleaseError(f"release manifest {where}: {key!r} lacks {', '.join(missing)}",
                               hint="a release entry needs name, url and sha256; ask the publisher to fix it")
        sha = str(entry["sha256"]).lower()
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise ReleaseError(f"release manifest {where}: {key!r} has sha256 {entry['sha256']!r}, not 64 hex digits",
                               hint="the publisher's manifest is malformed")
        name = str(entry["name"])
        try:
            project, version, _, _ = parse_wheel_filename(name)
        except InvalidWheelFilename as exc:
            raise ReleaseError(f"release manifest {where}: {key!r} names {name!r}, which is not a wheel",
                               hint="only wheels can be staged for an offline install") from exc
        out.append(ReleaseArtifact(
            key=key,
            filename=name,
            url=urllib.parse.urljoin(release.url, str(entry["url"])),
            sha256=sha,
            project=canonicalize_name(project),
            version=str(version),
            manifest_url=release.url,
            size=int(entry["size"]) if isinstance(entry.get("size"), int) else None,
        ))
    return out


def load_release(release: ReleaseManifest, client: HttpClient) -> tuple[list[ReleaseArtifact], str]:
    """Download and parse a release manifest; returns its artifacts and the JSON's own sha256."""
    try:
        body = client.get(release.url).body
    except HttpError as exc:
        raise ReleaseError(f"could not download release manifest {release.url}: {exc.reason}",
                           hint=exc.hint or "check [[manifest]] url and the network") from exc
    digest = hashlib.sha256(body).hexdigest()
    if release.sha256 and digest != release.sha256.lower():
        raise ReleaseError(f"release manifest {release.url} has sha256 {digest}, the stack manifest expects {release.sha256}",
                           hint="the release moved: update [[manifest]] sha256 after checking what changed")
    try:
        data = parse_json(body, source=release.url, what="release manifest", error=ReleaseError,
                          hint="check [[manifest]] url")
    except ReleaseError as exc:
        if isinstance(exc.__cause__, ValueError):  # (the message it always gave)
            raise ReleaseError(f"release manifest {release.url} is not valid JSON: {exc.__cause__}",
                               hint="check [[manifest]] url") from exc.__cause__
        raise
    return parse_release(data, release), digest


def release_links_page(artifacts: Sequence[ReleaseArtifact]) -> str:
    """A find-links HTML page listing the artifacts with their ``#sha256=`` (PEP 503 style).

    Handing this page to the resolver makes release wheels ordinary candidates:
    their dependencies are read by range requests (no body download, so a dry
    run stays cheap) and the fetch verifies each body against the manifest's sha256.
    """
    rows = [
        f'<a href="{html.escape(a.url)}#sha256={a.sha256}">{html.escape(a.filename)}</a><br/>'
        for a in artifacts
    ]
    return "<!DOCTYPE html>\n<html><body>\n" + "\n".join(rows) + "\n</body></html>\n"


def load_releases(releases: Sequence[ReleaseManifest], client: HttpClient) -> tuple[list[ReleaseArtifact], list[dict]]:
    """Every artifact of every release manifest, and provenance records (url, keys, sha256 of each JSON)."""
    artifacts: list[ReleaseArtifact] = []
    provenance = []
    for release in releases:
        found, digest = load_release(release, client)
        artifacts += found
        provenance.append({"url": release.url, "sha256": digest,
                           "artifacts": {a.key: {"name": a.filename, "sha256": a.sha256} for a in found}})
    return artifacts, provenance


def fetch_release_artifacts(
    releases: Sequence[ReleaseManifest],
    folder: Path,
    cache: Path,
    *,
    client: HttpClient | None = None,
    jobs: int = 8,
    reporter: Reporter | None = None,
) -> tuple[list[ReleaseArtifact], list[dict]]:
    """Fetch every release manifest's artifacts, verified, into ``folder`` (a find-links folder).

    Returns the artifacts and provenance records (url, keys, sha256 of each JSON).
    A bad sha256 raises HashMismatch and the bytes are not kept.
    """
    client = client or HttpClient()
    reporter = reporter or NullReporter()
    artifacts, provenance = load_releases(releases, client)
    if artifacts:
        fetch_all([a.fetch_item() for a in artifacts], folder, cache, jobs=jobs, client=client, reporter=reporter,
                  task="release artifacts")
    return artifacts, provenance
