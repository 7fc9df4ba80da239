"""A real OCI registry on 127.0.0.1 for a test: Debian's ``docker-registry`` (the CNCF distribution
registry), filesystem storage under the test's tmp_path, optionally with htpasswd (basic) auth.

    reg = start_registry(tmp_path)                  # pytest.skip (with the reason) where it cannot start
    reg.ref("wh/stack:v1")                          # "oci://127.0.0.1:PORT/wh/stack:v1"
    reg.blob_uploads(); reg.blob_fetches()          # counted from the registry's own access log
    reg.blob_file(digest)                           # the stored bytes, to corrupt one on purpose

The binary: $WH_TEST_REGISTRY_BIN, else ``docker-registry`` (Debian) or ``registry`` (upstream) on
PATH. .ci/run installs the Debian package. bcrypt for htpasswd comes from the C library's crypt
(libxcrypt), so no Python package is needed; the auth registry skips where it has no bcrypt.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["Registry", "start_registry", "registry_binary", "bcrypt_hash"]

_ACCESS = re.compile(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (\S+) HTTP/[\d.]+" (\d{3})')


def registry_binary() -> str | None:
    explicit = os.environ.get("WH_TEST_REGISTRY_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in ("docker-registry", "registry"):
        found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if found:
            return found
    return None


def bcrypt_hash(password: str) -> str | None:
    """A bcrypt hash (``$2b$``) from the C library's crypt, or None where it has no bcrypt."""
    name = ctypes.util.find_library("crypt") or "libcrypt.so.1"
    try:
        lib = ctypes.CDLL(name)
        lib.crypt_gensalt.restype = ctypes.c_char_p
        lib.crypt.restype = ctypes.c_char_p
        salt = lib.crypt_gensalt(b"$2b$", 5, None, 0)
        out = lib.crypt(password.encode(), salt) if salt else None
    except (OSError, AttributeError):
        return None
    if not out or not out.startswith(b"$2"):
        return None
    return out.decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    storage: Path
    log: Path
    proc: subprocess.Popen
    ca: Path | None = None  # the self-signed certificate of a TLS registry

    def ref(self, name: str) -> str:
        return f"oci://{self.host}/{name}"

    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of every request the registry answered so far, from its access log."""
        self._settle()
        text = self.log.read_text(errors="replace")
        return [(m.group(1), m.group(2), int(m.group(3))) for m in _ACCESS.finditer(text)]

    def blob_uploads(self) -> int:
        """Blobs the registry accepted (the closing PUT of an upload carries ?digest=)."""
        return sum(1 for m, p, s in self.requests() if m == "PUT" and "/blobs/uploads/" in p and "digest=" in p
                   and s == 201)

    def blob_fetches(self) -> int:
        """Blob bodies the registry sent (GET /v2/<repo>/blobs/<digest>)."""
        return sum(1 for m, p, s in self.requests() if m == "GET" and re.search(r"/blobs/sha256:[0-9a-f]{64}$", p))

    def blob_file(self, digest: str) -> Path:
        """Where the registry keeps a blob's bytes (distribution's filesystem driver layout)."""
        hexd = digest.split(":", 1)[1]
        return self.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexd[:2] / hexd / "data"

    def _settle(self) -> None:
        """Wait until the access log stops growing (a line is written just after the response)."""
        last = -1
        for _ in range(20):
            size = self.log.stat().st_size
            if size == last:
                return
            last = size
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (and its key), made with the openssl command; skip without it."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a certificate for the TLS registry")
    cert, key = folder / "cert.pem", folder / "key.pem"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {r.stderr[-300:]}")
    return cert, key


def start_registry(folder: Path, *, user: str | None = None, password: str | None = None,
                   tls: bool = False) -> Registry:
    """Start a registry on a free loopback port with its storage under ``folder``; skip where it cannot.
    ``user``/``password``: htpasswd (basic) auth; ``tls``: https with a self-signed certificate (``.ca``)."""
    binary = registry_binary()
    if binary is None:
        pytest.skip("no OCI registry binary (apt-get install docker-registry, or set WH_TEST_REGISTRY_BIN)")
    folder.mkdir(parents=True, exist_ok=True)
    storage = folder / "storage"
    port = _free_port()
    auth = ""
    if user is not None:
        hashed = bcrypt_hash(password or "")
        if hashed is None:
            pytest.skip("the C library's crypt has no bcrypt: cannot write an htpasswd file for the registry")
        (folder / "htpasswd").write_text(f"{user}:{hashed}\n")
        auth = f"auth:\n  htpasswd:\n    realm: wh-test\n    path: {folder / 'htpasswd'}\n"
    cert = key = None
    if tls:
        cert, key = _self_signed(folder)
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: info\n  formatter: text\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: wh-test-only\n"
        + (f"  tls:\n    certificate: {cert}\n    key: {key}\n" if tls else "")
        + auth
    )
    log = folder / "registry.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([binary, "serve", str(config)], stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/v2/"
    context = ssl.create_default_context(cafile=str(cert)) if tls else None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-800:]
            pytest.skip(f"the OCI registry ({binary}) exited at start: {tail}")
        try:
            urllib.request.urlopen(url, timeout=1, context=context).close()
            break
        except urllib.error.HTTPError:  # 401 with auth on: it is up
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        proc.wait()
        pytest.skip(f"the OCI registry ({binary}) did not answer on 127.0.0.1:{port} within 15 s")
    return Registry(f"127.0.0.1:{port}", storage, log, proc, ca=cert)
