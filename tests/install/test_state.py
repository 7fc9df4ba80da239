"""installed.json: what wh installed from where; never trusted while an install's journal is there."""

from __future__ import annotations

import json

from wheelmaker import make_wheel
from nvidia_fixtures import make_wheelhouse

from wheelhouse.install.state import read_install_state, state_path, unfinished_transaction, write_install_state
from wheelhouse.install.transaction import Transaction
from wheelhouse.install.wheelhouses import load_wheelhouse


def test_write_then_read_merges_packages_and_wheelhouses(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    h1 = load_wheelhouse(make_wheelhouse(tmp_path / "h1", [make_wheel(tmp_path / "w", "a", "1.0")]))
    h2 = load_wheelhouse(make_wheelhouse(tmp_path / "h2", [make_wheel(tmp_path / "w2", "B_pkg", "2.0")]))
    write_install_state(str(site), [(h1, h1.files[0])], [h1])
    write_install_state(str(site), [(h2, h2.files[0])], [h2])
    state = read_install_state(site)
    assert state["wheelhouses"] == [str(h1.path), str(h2.path)]
    assert state["packages"]["a"]["version"] == "1.0" and state["packages"]["b-pkg"]["sha256"] == h2.files[0].sha256
    assert state_path(site) == site / ".wh" / "installed.json"


def test_a_damaged_state_reads_as_empty(tmp_path):
    path = state_path(tmp_path)
    path.parent.mkdir()
    for body in ("not json", json.dumps({"wheelhouses": "x"}), json.dumps({"packages": {"a": 1}})):
        path.write_text(body)
        assert read_install_state(tmp_path) == {"schema": "wh-installed/2", "wheelhouses": [], "sources": {},
                                                "packages": {}, "installed_at": None}


def test_state_vouches_for_nothing_while_a_journal_is_there(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    h = load_wheelhouse(make_wheelhouse(tmp_path / "h", [make_wheel(tmp_path / "w", "a", "1.0")]))
    write_install_state(str(site), [(h, h.files[0])], [h])
    txn = Transaction(site, ["a-1.0-py3-none-any.whl"])
    txn.begin([str(site / "a.py")])
    assert read_install_state(site)["packages"] == {}
    found = unfinished_transaction(site)
    assert found is not None and found.wheels == ("a-1.0-py3-none-any.whl",) and found.pid > 0
    txn.commit()
    assert unfinished_transaction(site) is None
    assert read_install_state(site)["packages"]["a"]["version"] == "1.0"
