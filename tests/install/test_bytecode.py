"""Streaming byte-compilation in the receiving interpreter."""

from __future__ import annotations

import sys

import pytest

from wheelhouse.install.bytecode import ByteCompiler
from wheelhouse.install.errors import InstallFailed


def test_compiles_what_it_is_fed_with_the_receiving_interpreters_magic(tmp_path):
    files = []
    for i in range(5):
        f = tmp_path / f"m{i}.py"
        f.write_text(f"X = {i}\n")
        files.append(f)
    bc = ByteCompiler(sys.executable, 2)
    for f in files:
        bc.submit(str(f))
    assert bc.finish() == 5
    tag = sys.implementation.cache_tag
    assert sorted(p.name for p in (tmp_path / "__pycache__").iterdir()) == [f"m{i}.{tag}.pyc" for i in range(5)]


def test_a_syntax_error_is_counted_not_fatal_and_abort_kills_the_workers(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    bc = ByteCompiler(sys.executable, 1)
    bc.submit(str(bad))
    assert bc.finish() == 1
    assert not (tmp_path / "__pycache__").exists()
    bc = ByteCompiler(sys.executable, 2)
    bc.abort()
    bc.submit(str(bad))  # a dead worker: submit never raises
    with pytest.raises(InstallFailed, match="byte-compilation failed"):
        bc.finish()
