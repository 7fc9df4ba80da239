"""wheelhouse.digest: the streamed sha256 is hashlib's, and RECORD digests are encoded per PEP 376/427."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import zipfile

from wheelmaker import make_wheel

from wheelhouse.digest import record_digest, sha256_of, update_hash


def test_sha256_of_matches_hashlib_across_block_boundaries(tmp_path):
    for size in (0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, (3 << 20) + 12345):
        data = os.urandom(size)
        path = tmp_path / f"f{size}"
        path.write_bytes(data)
        assert sha256_of(path) == hashlib.sha256(data).hexdigest(), size


def test_update_hash_continues_a_running_hash(tmp_path):
    # A resumed download hashes the bytes on disk, then the rest as it streams.
    head, tail = os.urandom(1_500_000), os.urandom(700_000)
    (tmp_path / "head").write_bytes(head)
    h = hashlib.sha256()
    update_hash(h, tmp_path / "head")
    h.update(tail)
    assert h.hexdigest() == hashlib.sha256(head + tail).hexdigest()


def test_record_digest_of_an_empty_file_is_the_well_known_value():
    # Every wheel with an empty __init__.py carries this line in its RECORD.
    assert record_digest(hashlib.sha256(b"").digest()) == "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"


def test_record_digest_is_urlsafe_base64_without_padding():
    # Find inputs whose standard base64 uses '+' and '/' (and all sha256 digests pad with one '=').
    for i in range(1000):
        raw = hashlib.sha256(str(i).encode()).digest()
        std = base64.b64encode(raw).decode()
        if "+" in std and "/" in std:
            break
    enc = record_digest(raw)
    assert enc == std.rstrip("=").replace("+", "-").replace("/", "_")
    assert "=" not in enc and "+" not in enc and "/" not in enc
    assert base64.urlsafe_b64decode(enc + "=") == raw


def test_record_digest_agrees_with_a_real_wheels_record(tmp_path):
    wheel = make_wheel(tmp_path, "demo", "1.0", modules={"demo": "X = 1\n"})
    with zipfile.ZipFile(wheel) as zf:
        record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(record).decode())))
        checked = 0
        for path, digest, size in rows:
            if path == record:
                continue
            data = zf.read(path)
            assert digest == "sha256=" + record_digest(hashlib.sha256(data).digest()), path
            assert int(size) == len(data)
            checked += 1
    assert checked >= 2
