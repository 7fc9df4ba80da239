"""A throwaway certificate authority and one server certificate it signed, made with the openssl command."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def make_test_pki(folder: Path, *, cn: str, san: str) -> Path:
    """``folder`` with ca.pem (the CA to trust) and srv.pem/srv.key for ``cn``, valid for ``san`` alone
    (e.g. ``DNS:index.test`` or ``IP:127.0.0.1``); skips the test without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=wh test CA")
    run("req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", f"/CN={cn}")
    (folder / "san.ext").write_text(f"subjectAltName={san}\n")
    run("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "srv.pem", "-days", "2", "-extfile", "san.ext")
    return folder
