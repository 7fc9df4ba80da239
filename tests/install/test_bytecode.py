"""Streaming byte-compilation in the receiving interpreter."""

from __future__ import annotations

import sys
import time

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


def test_a_file_full_of_compile_warnings_does_not_stall_its_worker(tmp_path):
    """Thousands of SyntaxWarnings (a literal compared with 'is') fill a stderr pipe nobody reads before the
    end; the worker must compile the file and the next ones before finish(), not block on its stderr."""
    noisy = tmp_path / "noisy.py"
    noisy.write_text("".join(f'x{i} = "a" is {i}\n' for i in range(4000)))
    after = tmp_path / "after.py"
    after.write_text("Y = 1\n")
    bc = ByteCompiler(sys.executable, 1)
    try:
        bc.submit(str(noisy))
        bc.submit(str(after))
        tag = sys.implementation.cache_tag
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (tmp_path / "__pycache__" / f"after.{tag}.pyc").exists():
            time.sleep(0.05)
        assert (tmp_path / "__pycache__" / f"noisy.{tag}.pyc").exists()
        assert (tmp_path / "__pycache__" / f"after.{tag}.pyc").exists()
    finally:
        assert bc.finish() == 2
