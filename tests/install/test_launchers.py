"""Console-script launchers and shebangs for the receiving interpreter."""

from __future__ import annotations

from wheelhouse.install.wheel.launchers import console_launchers, shebang


def test_launchers_skip_bad_references_and_long_interpreters_go_through_sh():
    eps = "[console_scripts]\ngood = pkg.cli:main.run [extra]\nbad = pkg\nsub/dir = pkg:main\n"
    [(name, body)] = console_launchers(eps)
    assert name == "good" and "from pkg.cli import main" in body and "sys.exit(main.run())" in body
    assert console_launchers("not ini") == []
    assert shebang("/usr/bin/python3") == b"#!/usr/bin/python3\n"
    assert shebang("/a b/python").startswith(b"#!/bin/sh\n")
