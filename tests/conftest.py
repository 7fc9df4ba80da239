"""Shared fixtures. Module-specific fixtures live in the test module or in tests/<name>_fixtures.py."""

from __future__ import annotations

import json
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


# Seconds each test file took in a whole run (setup, call and teardown of its tests summed), most first:
# `pytest --record-file-costs` rewrites it. The suite runs one file per worker at a time (pyproject's
# `--dist loadfile --no-loadscope-reorder`), and a file handed out last is the run's tail: files go out in this
# order, the dearest first, so the cheap ones fill in at the end (longest-processing-time-first scheduling).
# A file not listed (a new one) counts as the median file; stale figures cost balance, never a result.
FILE_COSTS = Path(__file__).parent / "file_costs.json"


def pytest_addoption(parser):
    parser.addoption("--record-file-costs", action="store_true",
                     help=f"after the run, write each test file's seconds into {FILE_COSTS.name} (the order files "
                          "are handed to workers in)")


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _by_cost(items: list) -> list:
    """``items`` with whole files ordered dearest first (file_costs.json), the tests of a file in their order."""
    try:
        costs = json.loads(FILE_COSTS.read_text())
    except (OSError, ValueError):
        return items
    known = sorted(costs.values())
    unknown = known[len(known) // 2] if known else 0.0
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_file_of(item.nodeid), i)
    return sorted(items, key=lambda item: (-costs.get(_file_of(item.nodeid), unknown),
                                           first_seen[_file_of(item.nodeid)]))


def pytest_collection_modifyitems(config, items):
    """Files ordered dearest first (FILE_COSTS); registry tests are opt-in: -m registry, or WH_TEST_REGISTRY=1."""
    items[:] = _by_cost(items)
    wanted = os.environ.get("WH_TEST_REGISTRY") == "1" or "registry" in (config.getoption("-m") or "")
    if wanted:
        return
    skip = pytest.mark.skip(reason="touches the package registry; opt in with -m registry or WH_TEST_REGISTRY=1")
    for item in items:
        if "registry" in item.keywords:
            item.add_marker(skip)


_file_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Each test's phases, summed per file (the controller sees every worker's reports)."""
    _file_seconds[_file_of(report.nodeid)] = _file_seconds.get(_file_of(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session):
    if not session.config.getoption("--record-file-costs") or hasattr(session.config, "workerinput"):
        return
    try:
        costs = json.loads(FILE_COSTS.read_text())
    except (OSError, ValueError):
        costs = {}
    costs.update({name: round(seconds, 1) for name, seconds in _file_seconds.items()})
    costs = {name: costs[name] for name in sorted(costs, key=lambda n: -costs[n]) if (REPO / name).exists()}
    FILE_COSTS.write_text(json.dumps(costs, indent=0) + "\n")


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
