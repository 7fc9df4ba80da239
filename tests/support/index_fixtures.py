"""A real package index on 127.0.0.1 for tests: PEP 691 JSON and PEP 503 HTML, PEP 658 metadata,
HTTP ranges, yanked files, requires-python, and knobs to misbehave (tamper, drop mid-file).

Usage::

    def test_x(pyindex, wheel_factory):
        wheel_factory("a", "1.0", requires=["b"])
        idx = pyindex(wheel_factory.folder, serve_metadata=False, ranges=True)
        idx.url                      # "http://127.0.0.1:PORT/simple/"
        idx.bytes_served("a-1.0-py3-none-any.whl")   # body bytes sent for that file
        idx.tamper("a-1.0-py3-none-any.whl")         # serve other bytes under the published hash
        idx.drop_after("a-1.0-py3-none-any.whl", 1000)  # next full GET dies after 1000 bytes
        pyindex(folder, auth=("alice", "TOKEN"))     # every request needs Basic alice:TOKEN (else 401)
        pyindex(folder, delay=0.05)                  # every request answered 50 ms late
        idx.delays["/simple/a/"] = 1.0; idx.rates["a-1.0-py3-none-any.whl"] = 1_000_000  # one slow page, one slow file
        idx.first_hit["/files/a-1.0-py3-none-any.whl"]  # time.monotonic() of its first request
        idx.range_starts("a-1.0-py3-none-any.whl", since=n)  # each GET's Range start (None: whole) from log[n]
        pyindex(folder, validators="last-modified")  # pages carry ETag ("etag"), Last-Modified, "both" or "none"
        idx.page_requests(), idx.not_modified        # page GETs so far; 304s answered, per path
        idx.script("/simple/a/", (500, b"", {}))      # the next request for that path gets this answer
        idx.stop()                                   # nothing answers at idx.url any more

Project pages carry validators (an ETag by default) and answer a matching If-None-Match or
If-Modified-Since with 304 Not Modified; ``last_modified`` is the page's date.

Files are served at ``/files/<filename>`` (metadata at ``<filename>.metadata``); project pages
at ``/simple/<normalized-name>/`` with relative links, the way real indexes do it.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import threading
import time
import zipfile
import io
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

__all__ = ["pyindex", "IndexServer", "package_source"]

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPE = "text/html"


def _project_of(filename: str) -> str | None:
    try:
        if filename.endswith(".whl"):
            return canonicalize_name(parse_wheel_filename(filename)[0])
        if filename.endswith((".tar.gz", ".zip")):
            return canonicalize_name(parse_sdist_filename(filename)[0])
    except Exception:
        return None
    return None


def _wheel_metadata(data: bytes) -> bytes | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for n in zf.namelist():
                if n.count("/") == 1 and n.endswith(".dist-info/METADATA"):
                    return zf.read(n)
    except zipfile.BadZipFile:
        return None
    return None


@dataclass
class IndexServer:
    """State of one served index; all knobs may be changed while it runs."""

    serve_metadata: bool = False
    ranges: bool = True
    json: bool = True
    html: bool = True
    hashes: bool = True
    yanked: dict[str, str | bool] = field(default_factory=dict)
    requires_python: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)  # filename -> served bytes
    published: dict[str, str] = field(default_factory=dict)  # filename -> sha256 on the pages
    served: Counter = field(default_factory=Counter)  # url path -> body bytes sent
    hits: Counter = field(default_factory=Counter)  # url path -> requests
    log: list[tuple[str, dict]] = field(default_factory=list)  # (path, request headers)
    drops: dict[str, int] = field(default_factory=dict)
    auth: tuple[str, str] | None = None  # (user, password): every request needs Basic auth, else 401
    validators: str = "etag"  # what project pages carry: "etag", "last-modified", "both" or "none"
    last_modified: str = "Wed, 21 Oct 2026 07:28:00 GMT"  # the pages' Last-Modified (change it with the files)
    not_modified: Counter = field(default_factory=Counter)  # url path -> 304s answered
    delay: float = 0.0  # seconds each request waits before it is answered (a slow index)
    delays: dict[str, float] = field(default_factory=dict)  # url path -> seconds that path waits, on top
    rates: dict[str, int] = field(default_factory=dict)  # filename -> bytes per second its body is sent at
    first_hit: dict[str, float] = field(default_factory=dict)  # url path -> time.monotonic() of its first request
    scripted: dict[str, list] = field(default_factory=dict)  # url path -> canned (status, body, headers), first first
    base: str = ""
    _server: object = field(default=None, repr=False)

    # --- setup ------------------------------------------------------------------------
    def add(self, *paths: str | Path) -> None:
        """Publish wheel / sdist files (or every such file in a folder)."""
        for p in paths:
            p = Path(p)
            items = sorted(p.iterdir()) if p.is_dir() else [p]
            for f in items:
                if f.is_file() and _project_of(f.name):
                    data = f.read_bytes()
                    self.files[f.name] = data
                    self.published[f.name] = hashlib.sha256(data).hexdigest()

    def tamper(self, filename: str, data: bytes | None = None) -> None:
        """Serve different bytes for ``filename`` while the pages keep the old hash."""
        old = self.files[filename]
        self.files[filename] = data if data is not None else old[:-16] + bytes(16)

    def script(self, path: str, *answers: tuple[int, bytes, dict]) -> None:
        """The next requests for ``path`` get these answers (status, body, headers), one each, in order."""
        self.scripted.setdefault(path, []).extend(answers)

    def drop_after(self, filename: str, nbytes: int) -> None:
        """The next full (non-range) GET of ``filename`` closes the connection after ``nbytes``."""
        self.drops[filename] = nbytes

    # --- questions tests ask ------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"{self.base}/simple/"

    def file_url(self, filename: str) -> str:
        return f"{self.base}/files/{filename}"

    def bytes_served(self, filename: str) -> int:
        return self.served[f"/files/{filename}"]

    def range_starts(self, filename: str, since: int = 0) -> list[int | None]:
        """Where each GET of ``filename`` logged from entry ``since`` on began: a Range start, None for the whole."""
        starts: list[int | None] = []
        for path, headers in self.log[since:]:
            if path == f"/files/{filename}":
                rng = headers.get("Range")
                starts.append(int(rng.split("=")[1].split("-")[0]) if rng else None)
        return starts

    def requests_for(self, filename: str) -> int:
        return self.hits[f"/files/{filename}"]

    def sha256(self, filename: str) -> str:
        return self.published[filename]

    def page_requests(self) -> int:
        """GETs of project and root pages so far (answered 200, 304 or 404)."""
        return sum(n for path, n in self.hits.items() if path.startswith("/simple"))

    def stop(self) -> None:
        """Stop serving: the port no longer answers (an offline run must not need it)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # --- rendering ----------------------------------------------------------------------
    def projects(self) -> list[str]:
        return sorted({n for n in (_project_of(f) for f in self.files) if n})

    def _files_of(self, project: str) -> list[str]:
        return sorted(f for f in self.files if _project_of(f) == project)

    def _metadata_hash(self, filename: str) -> str | None:
        if not (self.serve_metadata and filename.endswith(".whl")):
            return None
        meta = _wheel_metadata(self.files[filename])
        return hashlib.sha256(meta).hexdigest() if meta is not None else None

    def page(self, project: str | None, want_json: bool) -> tuple[bytes, str] | None:
        if project is None:
            names = self.projects()
            if want_json:
                body = {"meta": {"api-version": "1.1"}, "projects": [{"name": n} for n in names]}
                return json.dumps(body).encode(), JSON_TYPE
            links = "".join(f'<a href="{n}/">{n}</a>\n' for n in names)
            return f"<!DOCTYPE html><html><body>\n{links}</body></html>".encode(), HTML_TYPE
        files = self._files_of(project)
        if not files:
            return None
        if want_json:
            out = []
            for f in files:
                entry = {"filename": f, "url": f"../../files/{f}", "hashes": {"sha256": self.published[f]} if self.hashes else {}}
                entry["size"] = len(self.files[f])
                if f in self.requires_python:
                    entry["requires-python"] = self.requires_python[f]
                if f in self.yanked:
                    entry["yanked"] = self.yanked[f] if self.yanked[f] else True
                mh = self._metadata_hash(f)
                if mh:
                    entry["core-metadata"] = {"sha256": mh}
                    entry["data-dist-info-metadata"] = {"sha256": mh}
                out.append(entry)
            body = {"meta": {"api-version": "1.1"}, "name": project, "files": out, "versions": []}
            return json.dumps(body).encode(), JSON_TYPE
        links = []
        for f in files:
            href = f"../../files/{f}" + (f"#sha256={self.published[f]}" if self.hashes else "")
            attrs = [f'href="{html.escape(href)}"']
            if f in self.requires_python:
                attrs.append(f'data-requires-python="{html.escape(self.requires_python[f])}"')
            if f in self.yanked:
                attrs.append(f'data-yanked="{html.escape(str(self.yanked[f] or ""))}"')
            mh = self._metadata_hash(f)
            if mh:
                attrs.append(f'data-core-metadata="sha256={mh}"')
                attrs.append(f'data-dist-info-metadata="sha256={mh}"')
            links.append(f"<a {' '.join(attrs)}>{html.escape(f)}</a><br/>")
        body = f"<!DOCTYPE html><html><head><title>Links for {project}</title></head><body>\n" + "\n".join(links) + "\n</body></html>"
        return body.encode(), HTML_TYPE


def _make_handler(state: IndexServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _send(self, status: int, body: bytes, ctype: str = "text/plain", extra: dict | None = None):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command == "HEAD":
                return
            rate = state.rates.get(self.path.split("?", 1)[0].rpartition("/")[2])
            if not rate:
                self.wfile.write(body)
                return
            step = max(1, rate // 20)  # (a slow file: in pieces, 20 a second)
            for i in range(0, len(body), step):
                self.wfile.write(body[i:i + step])
                self.wfile.flush()
                time.sleep(0.05)

        def do_HEAD(self):  # noqa: N802  (uv and pip probe with HEAD)
            self.do_GET()

        def _count(self, path: str, n: int) -> None:
            if self.command != "HEAD":
                state.served[path] += n

        def do_GET(self):  # noqa: N802
            path = self.path.split("?", 1)[0]
            if self.command != "HEAD":
                state.hits[path] += 1
            state.log.append((path, dict(self.headers.items())))
            state.first_hit.setdefault(path, time.monotonic())
            if state.delay or path in state.delays:
                time.sleep(state.delay + state.delays.get(path, 0.0))
            if state.auth is not None:
                import base64

                want = "Basic " + base64.b64encode(":".join(state.auth).encode()).decode()
                if self.headers.get("Authorization") != want:
                    return self._send(401, b"credentials needed", extra={"WWW-Authenticate": 'Basic realm="wh-test"'})
            canned = state.scripted.get(path)
            if canned:
                status, body, extra = canned.pop(0)
                extra = dict(extra)
                return self._send(status, body, extra.pop("Content-Type", "text/plain"), extra)
            if path.startswith("/simple"):
                return self._simple(path)
            if path.startswith("/files/"):
                return self._file(path)
            self._send(404, b"not found")

        def _simple(self, path: str):
            rest = path[len("/simple"):].strip("/")
            accept = self.headers.get("Accept", "")
            want_json = state.json and (JSON_TYPE in accept or not state.html)
            if rest and rest != canonicalize_name(rest):
                return self._send(301, b"", extra={"Location": f"/simple/{canonicalize_name(rest)}/"})
            page = state.page(rest or None, want_json)
            if page is None:
                return self._send(404, b"no such project")
            body, ctype = page
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            validators = {}
            if state.validators in ("etag", "both"):
                validators["ETag"] = etag
            if state.validators in ("last-modified", "both"):
                validators["Last-Modified"] = state.last_modified
            inm, ims = self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
            # RFC 9110 13.2.2: If-None-Match wins when both are sent.
            fresh = (inm == etag) if (inm is not None and "ETag" in validators) else (
                ims is not None and "Last-Modified" in validators and ims == state.last_modified)
            if fresh:
                state.not_modified[path] += 1
                self.send_response(304)
                for k, v in validators.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._send(200, body, ctype, {**validators, "Vary": "Accept"})

        def _file(self, path: str):
            name = path[len("/files/"):]
            if name.endswith(".metadata"):
                wheel = name[: -len(".metadata")]
                meta = _wheel_metadata(state.files[wheel]) if state.serve_metadata and wheel in state.files else None
                if meta is None:
                    return self._send(404, b"no metadata")
                self._count(path, len(meta))
                return self._send(200, meta, "text/plain")
            data = state.files.get(name)
            if data is None:
                return self._send(404, b"no such file")
            size = len(data)
            rng = self.headers.get("Range")
            if rng and state.ranges:
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
                if not m or (m.group(1) == "" and m.group(2) == ""):
                    return self._send(416, b"", extra={"Content-Range": f"bytes */{size}"})
                if m.group(1) == "":
                    start, end = max(0, size - int(m.group(2))), size
                else:
                    start = int(m.group(1))
                    end = min(size, int(m.group(2)) + 1) if m.group(2) else size
                if start >= size or end <= start:
                    return self._send(416, b"", extra={"Content-Range": f"bytes */{size}"})
                part = data[start:end]
                self._count(path, len(part))
                return self._send(206, part, "application/octet-stream",
                                  {"Content-Range": f"bytes {start}-{end - 1}/{size}", "Accept-Ranges": "bytes"})
            extra = {"Accept-Ranges": "bytes"} if state.ranges else {}
            cut = state.drops.pop(name, None) if self.command != "HEAD" else None
            if cut is not None:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                state.served[path] += cut  # counted before writing: the client may be faster than this thread
                self.wfile.write(data[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            self._count(path, size)
            self._send(200, data, "application/octet-stream", extra)

    return Handler


def _pyindex():
    """Factory: ``pyindex(*folders_or_files, **knobs) -> IndexServer`` serving on 127.0.0.1."""
    servers: list[ThreadingHTTPServer] = []

    def start(*paths, **knobs) -> IndexServer:
        state = IndexServer(**knobs)
        state.add(*paths)
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(state))
        srv.daemon_threads = True
        state.base = f"http://127.0.0.1:{srv.server_address[1]}"
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(state)
        state._server = srv
        return state

    yield start
    for state in servers:
        state.stop()


try:  # the device scripts import this module where pytest may be absent
    import pytest
except ImportError:  # pragma: no cover
    pyindex = None
else:
    pyindex = pytest.fixture(_pyindex, name="pyindex")


def package_source(pyindex, tmp_path, packages, sdists=(), **knobs):
    """A loopback index of ``packages`` ((name, version, make_wheel keywords) each) and ``sdists`` (file names),
    served with ``knobs``, as the PackageSource a resolution reads."""
    from wheelhouse.index import PackageSource
    from wheelmaker import make_wheel

    folder = tmp_path / "index-files"
    for name, version, kw in packages:
        make_wheel(folder, name, version, **kw)
    idx = pyindex(folder, **knobs)
    for filename in sdists:
        (folder / filename).write_bytes(b"sdist")
        idx.add(folder / filename)
    return PackageSource([idx.url])
