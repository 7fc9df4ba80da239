"""A file server on 127.0.0.1 for download tests: Range support, a byte rate (a slow link), and
counts of what it served. Usable from a test and from a child process (``python -m`` is not
needed: ``serve_files(folder, rate)`` returns the running server).

    srv = serve_files({"a.whl": data}, rate=200_000)   # 200 kB/s per connection
    srv.url("a.whl"); srv.served["a.whl"]; srv.close()
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["SlowFileServer", "serve_files"]


class SlowFileServer:
    def __init__(self, files: dict[str, bytes], rate: float | None = None, piece: int = 16 * 1024):
        self.files = dict(files)
        self.rate = rate  # bytes per second per connection; None: as fast as possible
        self.piece = piece
        self.served: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                name = self.path.lstrip("/")
                rng = self.headers.get("Range")
                with server.lock:
                    server.requests.append((name, rng))
                data = server.files.get(name)
                if data is None:
                    self.send_error(404)
                    return
                start, end = 0, len(data)
                if rng:
                    first, _, last = rng.split("=", 1)[1].partition("-")
                    if first == "":  # bytes=-N: the last N bytes
                        start, end = max(0, len(data) - int(last)), len(data)
                    else:
                        start, end = int(first), min(len(data), int(last) + 1 if last else len(data))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(end - start))
                self.end_headers()
                pos = start
                try:
                    while pos < end:
                        chunk = data[pos : min(end, pos + server.piece)]
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        with server.lock:
                            server.served[name] = server.served.get(name, 0) + len(chunk)
                        pos += len(chunk)
                        if server.rate:
                            time.sleep(len(chunk) / server.rate)
                except OSError:
                    pass  # the client went away (killed, interrupted)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_files(files: dict[str, bytes], rate: float | None = None) -> SlowFileServer:
    return SlowFileServer(files, rate)
