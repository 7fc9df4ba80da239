"""Shared fixtures. Module-specific fixtures live in the test module or in tests/<name>_fixtures.py."""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "support"))

from wheelmaker import make_wheel  # noqa: E402
from index_fixtures import pyindex  # noqa: E402,F401  (fixture: a PEP 691/503 index on 127.0.0.1)

REPO = Path(__file__).resolve().parent.parent

# A suite started as a background job of a non-interactive shell (`cmd &`, as some CI runners do) inherits SIGINT
# ignored, and so would every wh the tests start: the Ctrl-C tests would then test nothing but that. A handler
# here (not SIG_IGN) makes each child start with the default again (exec resets handled signals, not ignored ones).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    """Registry tests are opt-in: -m registry, or WH_TEST_REGISTRY=1."""
    wanted = os.environ.get("WH_TEST_REGISTRY") == "1" or "registry" in (config.getoption("-m") or "")
    if wanted:
        return
    skip = pytest.mark.skip(reason="touches the package registry; opt in with -m registry or WH_TEST_REGISTRY=1")
    for item in items:
        if "registry" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _private_folders(tmp_path_factory):
    """This pytest process's own temp, cache and state folders (TMPDIR, XDG_CACHE_HOME, XDG_STATE_HOME).

    The suite runs in several processes (pytest-xdist, pyproject's addopts): without this, two of them would
    share ~/.cache/wh (wh's page and metadata caches, keyed by loopback URLs whose ports get reused),
    ~/.local/state/wh/serve.json (the one `wh serve` state), pip's and uv's caches, and /tmp, which some tests
    scan for what a `wh` left behind. A test that means to use another folder still sets its own."""
    root = tmp_path_factory.mktemp("private")
    names = ("TMPDIR", "XDG_CACHE_HOME", "XDG_STATE_HOME")
    saved = {name: os.environ.get(name) for name in names}
    for name in names:
        folder = root / name.lower()
        folder.mkdir()
        os.environ[name] = str(folder)
    tempfile.tempdir = None  # tempfile caches the folder it found first; read TMPDIR again
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    tempfile.tempdir = None


@pytest.fixture(autouse=True)
def _hermetic(request, monkeypatch):
    """Default tests reach nothing beyond loopback: any other connect() fails loudly."""
    if "registry" in request.keywords:
        yield
        return
    real_connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and not (host.startswith("127.") or host in ("localhost", "::1") or self.family == socket.AF_UNIX):
            raise OSError(f"hermetic test tried to reach {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    # wh reads pip's configuration (index-url, extra-index-url, find-links, trusted-host): the host's
    # pip.conf and PIP_* variables (a developer's mirror, a CI's find-links folder) are not the test's.
    # A test that means to read one sets PIP_CONFIG_FILE / PIP_* itself.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    yield


@pytest.fixture
def wheel_factory(tmp_path):
    """make_wheel bound to a fresh folder: wheel_factory("a", "1.0", requires=["b"])."""
    folder = tmp_path / "made-wheels"

    def _make(name, version, **kw):
        return make_wheel(kw.pop("directory", folder), name, version, **kw)

    _make.folder = folder
    return _make


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
