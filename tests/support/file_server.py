"""A file server on 127.0.0.1 for download tests: Range support (suffix ranges too), a byte rate
per connection (a slow link), knobs to misbehave, and counts of what it served.

    srv = FileServer(rate=200_000)          # 200 kB/s per connection; None: as fast as it can
    item = srv.add("a-1.0-py3-none-any.whl", data)   # a FetchItem with the right sha256 and size
    srv.tampered[name] = other_bytes        # served instead, under the same published hash
    srv.drop_after[name] = 1000             # the next answer for it dies after 1000 bytes (once)
    srv.ignore_range = True                 # answer 200 with the whole file to a Range request
    srv.auth = "user:password"              # Basic auth required (401 otherwise, counted in srv.unauthorized)
    srv.served[name]; srv.ranges; srv.close()
    srv.crawl(handler, name, body, rate)    # (a subclass's _send: one answer at its own rate)
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FileServer", "serve_files"]


class FileServer:
    def __init__(self, files: dict[str, bytes] | None = None, rate: float | None = None, piece: int = 16 * 1024):
        self.files: dict[str, bytes] = dict(files or {})
        self.tampered: dict[str, bytes] = {}
        self.drop_after: dict[str, int] = {}
        self.ignore_range = False
        self.auth: str | None = None
        self.unauthorized = 0
        self.rate = rate
        self.piece = piece
        self.served: dict[str, int] = {}
        self.ranges: list[str] = []  # "name:bytes=a-b" for every Range request honoured
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                name = self.path.lstrip("/")
                if server.auth and self.headers.get("Authorization") != "Basic " + base64.b64encode(
                        server.auth.encode()).decode():
                    with server.lock:
                        server.unauthorized += 1
                    self.send_error(401)
                    return
                if name not in server.files:
                    self.send_error(404)
                    return
                data = server.tampered.get(name, server.files[name])
                start, end = 0, len(data)
                rng = self.headers.get("Range")
                if rng and not server.ignore_range:
                    with server.lock:
                        server.ranges.append(f"{name}:{rng}")
                    first, _, last = rng.split("=", 1)[1].partition("-")
                    if first == "":  # bytes=-N: the last N bytes
                        start = max(0, len(data) - int(last))
                    else:
                        start, end = int(first), min(len(data), int(last) + 1 if last else len(data))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(end - start))
                self.end_headers()
                with server.lock:
                    cut = server.drop_after.pop(name, None)
                body = data[start:end] if cut is None else data[start : start + cut]
                server._send(self, name, body)
                if cut is not None:
                    self.wfile.flush()
                    self.connection.shutdown(2)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def _send(self, handler, name: str, body: bytes) -> None:
        """Write ``body`` (at ``rate``), counting each piece BEFORE it is written: the client can
        finish reading (and the test assert) before this thread runs again."""
        try:
            for pos in range(0, len(body), self.piece if self.rate else max(len(body), 1)):
                chunk = body[pos : pos + (self.piece if self.rate else len(body))]
                with self.lock:
                    self.served[name] = self.served.get(name, 0) + len(chunk)
                handler.wfile.write(chunk)
                if self.rate:
                    handler.wfile.flush()
                    time.sleep(len(chunk) / self.rate)
        except OSError:
            pass  # the client went away (killed, interrupted)

    def crawl(self, handler, name: str, body: bytes, rate: float, counted=None) -> None:
        """Write ``body`` at ``rate`` bytes/s in 16 KiB pieces, each counted (``served[name]``, and
        ``counted(n)`` where given) before it is written; a client that went away ends it quietly."""
        try:
            for pos in range(0, len(body), 16 * 1024):
                chunk = body[pos:pos + 16 * 1024]
                with self.lock:
                    self.served[name] = self.served.get(name, 0) + len(chunk)
                    if counted is not None:
                        counted(len(chunk))
                handler.wfile.write(chunk)
                handler.wfile.flush()
                time.sleep(len(chunk) / rate)
        except OSError:
            pass  # cut by the client: the rest is fetched by another connection

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def add(self, name: str, data: bytes):
        from wheelhouse.fetch import FetchItem

        self.files[name] = data
        return FetchItem(self.url(name), name, hashlib.sha256(data).hexdigest(), len(data))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_files(files: dict[str, bytes], rate: float | None = None) -> FileServer:
    return FileServer(files, rate)
