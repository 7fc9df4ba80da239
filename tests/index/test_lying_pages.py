"""Round 9 of hostile-index tests: a real index on 127.0.0.1 whose pages lie about what they list."""

from __future__ import annotations

import json

import pytest
from wheelmaker import make_wheel

from wheelhouse.index import PackageSource
from wheelhouse.resolve import resolve
from wheelhouse.target import target_from_flags

CP312 = target_from_flags("3.12", ["manylinux_2_35_x86_64"])
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def _json_page(idx, filenames):
    files = [{"filename": n, "url": idx.file_url(n), "hashes": {"sha256": idx.sha256(n)}} for n in filenames]
    return json.dumps({"meta": {"api-version": "1.0"}, "name": "alpha", "files": files}).encode(), JSON_TYPE


def _html_page(idx, filenames):
    links = "".join(f'<a href="{idx.file_url(n)}#sha256={idx.sha256(n)}">{n}</a>' for n in filenames)
    return f"<html><body>{links}</body></html>".encode(), "text/html"


@pytest.mark.parametrize("page", [_json_page, _html_page], ids=["json", "html"])
def test_a_project_page_listing_another_projects_wheel_does_not_pin_it(pyindex, tmp_path, page):
    """The page of `alpha` also lists `evil-9.0`: that file is not a release of alpha (pip drops
    it too), so `alpha` resolves to alpha 1.0, never to evil's wheel under alpha's name."""
    make_wheel(tmp_path / "w", "alpha", "1.0")
    make_wheel(tmp_path / "w", "evil", "9.0")
    idx = pyindex(tmp_path / "w")
    body, ctype = page(idx, ["alpha-1.0-py3-none-any.whl", "evil-9.0-py3-none-any.whl"])
    idx.script("/simple/alpha/", (200, body, {"Content-Type": ctype}))
    src = PackageSource([idx.url])
    assert [d.filename for d in src.files("alpha")] == ["alpha-1.0-py3-none-any.whl"]
    res = resolve(["alpha"], CP312, PackageSource([idx.url]))
    assert res.pin("alpha").distfile.filename == "alpha-1.0-py3-none-any.whl"
