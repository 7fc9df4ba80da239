"""install:transaction through ``run(ctx)``: a journal of an install that did not finish, in any site
folder the interpreter imports from, is a fail; a run that still holds the lock is told apart from a
dead one (wait, or run `wh install` again), and every unfinished site is named."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from wheelhouse.doctor import gather_context
from wheelhouse.doctor.checks.install import run
from wheelhouse.folderlock import FolderLock
from wheelhouse.install.transaction import Transaction, journal_path


@pytest.fixture(scope="module")
def real_ctx():
    return gather_context(sys.executable, checks=["install:transaction"], timeout=30)


def _ctx(real_ctx, platlib, *others):
    facts = {**real_ctx.facts, "platlib": str(platlib), "purelib": str(platlib)}
    return dataclasses.replace(real_ctx, facts=facts, site_dirs=(platlib, *others))


def _half_done(site, *wheels):
    """An install that wrote its journal and moved the old file aside, then stopped (its process gone)."""
    (site / "mod.py").write_text("OLD = 1\n")
    txn = Transaction(site, wheels)
    txn.begin([str(site / "mod.py")])
    return txn


def test_site_folders_without_a_journal_are_ok(real_ctx, tmp_path):
    a, b = tmp_path / "venv-site", tmp_path / "base-site"
    a.mkdir(), b.mkdir()
    (r,) = run(_ctx(real_ctx, a, a, b))
    assert (r.id, r.verdict) == ("install:transaction", "ok")
    assert r.evidence == "no unfinished install in 2 site folder(s)", "the platlib is counted once"


def test_an_unfinished_install_fails_until_it_is_rolled_back(real_ctx, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    txn = _half_done(site, "big-1.0-py3-none-any.whl")
    (r,) = run(_ctx(real_ctx, site))
    assert r.verdict == "fail"
    assert f"unfinished install in {site}: " in r.evidence and "(big-1.0-py3-none-any.whl) did not finish" in r.evidence
    assert str(journal_path(site)) in r.evidence
    assert r.hint == f"run `wh install` again (e.g. `wh install WHEELHOUSE --python {real_ctx.python}`) to roll it back"
    assert r.data["unfinished"][0]["running"] is False
    txn.rollback()
    assert (site / "mod.py").read_text() == "OLD = 1\n"
    assert run(_ctx(real_ctx, site))[0].verdict == "ok"


def test_an_install_still_holding_the_lock_says_wait(real_ctx, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _half_done(site, "big-1.0-py3-none-any.whl")
    with FolderLock(site):
        (r,) = run(_ctx(real_ctx, site))
    assert r.verdict == "fail" and "is still running" in r.evidence
    assert r.hint.startswith("wait for the running `wh install` to finish")


def test_every_unfinished_site_folder_is_named(real_ctx, tmp_path):
    venv, parent = tmp_path / "venv-site", tmp_path / "parent-site"
    venv.mkdir(), parent.mkdir()
    _half_done(venv, "a-1.0-py3-none-any.whl")
    _half_done(parent, "b-1.0-py3-none-any.whl")
    (r,) = run(_ctx(real_ctx, venv, parent))
    assert r.verdict == "fail"
    assert [u["site"] for u in r.data["unfinished"]] == [str(venv), str(parent)]
    assert [u["wheels"] for u in r.data["unfinished"]] == [["a-1.0-py3-none-any.whl"], ["b-1.0-py3-none-any.whl"]]
