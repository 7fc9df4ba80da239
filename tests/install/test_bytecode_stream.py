"""Byte-compilation overlaps extraction: a file is compiled as soon as it is submitted, by every worker at once.

Found on the offline H200 box (16 cores): paths waited in wh's side of each worker's pipe until ``finish()``,
which then closed one worker's input and waited for it before the next: the workers ran one after another
and ``--compile`` took 5x uv's time on a stack of small files.
"""

from __future__ import annotations

import sys
import time

from wheelhouse.install.bytecode import ByteCompiler


def _missing_after(paths, seconds: float = 20.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        missing = [p.name for p in paths if not p.exists()]
        if not missing:
            return []
        time.sleep(0.02)
    return missing


def test_every_worker_compiles_what_it_was_given_before_finish(tmp_path):
    tag = sys.implementation.cache_tag
    bc = ByteCompiler(sys.executable, 4)
    try:
        files = []
        for i in range(8):  # two for each worker, round-robin
            f = tmp_path / f"m{i}.py"
            f.write_text(f"X = {i}\n")
            files.append(f)
            bc.submit(str(f))
        # Before finish(): every worker already has its paths and compiles them.
        assert _missing_after([tmp_path / "__pycache__" / f"{f.stem}.{tag}.pyc" for f in files]) == []
    finally:
        assert bc.finish() == 8

