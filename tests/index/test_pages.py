"""wheelhouse.index.pages: PEP 691 JSON and PEP 503 HTML project pages read into Distfile values,
with PEP 592 yanking, requires-python and PEP 658/714 core metadata."""

from __future__ import annotations

import hashlib
import json
import urllib.request

from wheelhouse.index.pages import parse_simple_html, parse_simple_json

PAGE = "http://127.0.0.1:9/simple/demo/"
SHA = "a" * 64
META = "b" * 64
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never via a proxy


def _by_name(distfiles):
    return {d.filename: d for d in distfiles}


def test_json_page_fields_become_distfile_values():
    data = {"meta": {"api-version": "1.1"}, "name": "demo", "files": [
        {"filename": "demo-1.0-py3-none-any.whl", "url": "../../files/demo-1.0-py3-none-any.whl",
         "hashes": {"sha256": SHA}, "requires-python": ">=3.8", "size": 1234,
         "core-metadata": {"sha256": META}},
        {"filename": "demo-0.9.tar.gz", "url": "https://files.example.invalid/demo-0.9.tar.gz#md5=00ff",
         "hashes": {"sha256": SHA}, "yanked": "security hole", "core-metadata": False},
        {"filename": "demo-0.8-py3-none-any.whl", "url": "/files/demo-0.8-py3-none-any.whl", "hashes": {},
         "yanked": True, "requires-python": ""},
        {"filename": "demo-0.1.exe", "url": "demo-0.1.exe", "hashes": {}},
    ]}
    got = _by_name(parse_simple_json(data, PAGE, "idx"))
    assert sorted(got) == ["demo-0.8-py3-none-any.whl", "demo-0.9.tar.gz", "demo-1.0-py3-none-any.whl"]

    w = got["demo-1.0-py3-none-any.whl"]
    assert w.url == "http://127.0.0.1:9/files/demo-1.0-py3-none-any.whl"  # relative to the page
    assert (w.name, w.version, w.sha256, w.requires_python, w.size, w.origin) == ("demo", "1.0", SHA, ">=3.8", 1234, "idx")
    assert (w.yanked, w.yanked_reason) == (False, None)
    assert w.metadata_url == w.url + ".metadata" and w.metadata_sha256 == META

    s = got["demo-0.9.tar.gz"]
    assert s.url == "https://files.example.invalid/demo-0.9.tar.gz"  # fragment split off ...
    assert s.hashes == {"md5": "00ff", "sha256": SHA}  # ... and merged with the hashes dict
    assert (s.yanked, s.yanked_reason, s.metadata_url) == (True, "security hole", None)

    old = got["demo-0.8-py3-none-any.whl"]
    assert old.url == "http://127.0.0.1:9/files/demo-0.8-py3-none-any.whl"
    assert (old.yanked, old.yanked_reason, old.requires_python, old.sha256) == (True, None, None, None)


def test_json_core_metadata_keys_per_pep_714():
    def meta_of(**fields):
        f = {"filename": "demo-1.0-py3-none-any.whl", "url": "demo-1.0-py3-none-any.whl", "hashes": {}, **fields}
        [d] = parse_simple_json({"files": [f]}, PAGE, "idx")
        return d.metadata_url is not None, d.metadata_sha256

    assert meta_of() == (False, None)
    assert meta_of(**{"core-metadata": True}) == (True, None)
    assert meta_of(**{"data-dist-info-metadata": {"sha256": META}}) == (True, META)  # the pre-714 name
    assert meta_of(**{"dist-info-metadata": True}) == (True, None)
    # core-metadata wins when both are present (PEP 714: the old key may be stale)
    assert meta_of(**{"core-metadata": False, "data-dist-info-metadata": {"sha256": META}}) == (False, None)
    assert meta_of(**{"core-metadata": {"sha256": META}, "data-dist-info-metadata": True}) == (True, META)


def test_json_keep_filters_by_file_name_and_build_tags_parse():
    files = [{"filename": f, "url": f, "hashes": {}} for f in
             ("Demo_Pkg-1.0-2-cp312-cp312-linux_x86_64.whl", "Demo_Pkg-1.0-py3-none-any.whl", "demo_pkg-1.0.tar.gz")]
    got = parse_simple_json({"files": files}, PAGE, "idx", keep=lambda f: f.endswith(".whl"))
    assert [(d.name, d.version, d.build_tag) for d in got] == [("demo-pkg", "1.0", (2, "")), ("demo-pkg", "1.0", ())]


HTML = f"""<!DOCTYPE html><html><head><base href="../../files/"></head><body>
<a href="demo-1.0-py3-none-any.whl#sha256={SHA}" data-requires-python="&gt;=3.8,&lt;4" data-core-metadata="sha256={META}">x</a>
<a href="demo-0.9-py3-none-any.whl" data-yanked="">demo-0.9</a>
<a href="demo-0.8.tar.gz#md5=00ff" data-yanked="do not use &amp; why" data-dist-info-metadata>y</a>
<a href="demo-1.0%2Blocal-py3-none-any.whl" data-dist-info-metadata="true">z</a>
<a href="https://mirror.example.invalid/demo-0.7.zip">abs</a>
<a href="../other/">not a file</a><a>no href</a>
</body></html>"""


def test_html_page_attributes_become_distfile_values():
    got = _by_name(parse_simple_html(HTML, PAGE, "idx"))
    assert sorted(got) == ["demo-0.7.zip", "demo-0.8.tar.gz", "demo-0.9-py3-none-any.whl",
                           "demo-1.0+local-py3-none-any.whl", "demo-1.0-py3-none-any.whl"]
    w = got["demo-1.0-py3-none-any.whl"]
    assert w.url == "http://127.0.0.1:9/files/demo-1.0-py3-none-any.whl"  # <base> is honoured
    assert (w.sha256, w.requires_python, w.yanked) == (SHA, ">=3.8,<4", False)  # HTML entities decoded
    assert (w.metadata_url, w.metadata_sha256) == (w.url + ".metadata", META)

    assert (got["demo-0.9-py3-none-any.whl"].yanked, got["demo-0.9-py3-none-any.whl"].yanked_reason) == (True, None)
    sd = got["demo-0.8.tar.gz"]
    assert (sd.yanked, sd.yanked_reason, sd.hashes) == (True, "do not use & why", {"md5": "00ff"})
    assert sd.metadata_url == sd.url + ".metadata" and sd.metadata_sha256 is None  # a bare attribute is "true"
    local = got["demo-1.0+local-py3-none-any.whl"]
    assert local.version == "1.0+local" and local.url.endswith("demo-1.0%2Blocal-py3-none-any.whl")
    assert local.metadata_url is not None
    assert got["demo-0.7.zip"].url == "https://mirror.example.invalid/demo-0.7.zip"
    assert got["demo-0.9-py3-none-any.whl"].metadata_url is None


def test_html_core_metadata_is_preferred_over_the_old_attribute():
    page = f'<a href="demo-1.0-py3-none-any.whl" data-core-metadata="sha256={META}" data-dist-info-metadata="sha256={SHA}">x</a>'
    [d] = parse_simple_html(page, PAGE, "idx")
    assert d.metadata_sha256 == META


def test_json_and_html_pages_of_a_real_index_agree(pyindex, wheel_factory):
    wheel_factory("demo", "1.0")
    wheel_factory("demo", "2.0", requires_python=">=3.99")
    wheel_factory("demo", "0.5")
    idx = pyindex(wheel_factory.folder, serve_metadata=True)
    idx.requires_python["demo-2.0-py3-none-any.whl"] = ">=3.99"
    idx.yanked["demo-0.5-py3-none-any.whl"] = "bad <build>"
    page = idx.url + "demo/"

    def fetch(accept):
        with _OPENER.open(urllib.request.Request(page, headers={"Accept": accept}), timeout=10) as r:
            assert r.headers["Content-Type"] == accept
            return r.read()

    from_json = parse_simple_json(json.loads(fetch("application/vnd.pypi.simple.v1+json")), page, "idx")
    from_html = parse_simple_html(fetch("text/html").decode(), page, "idx")
    key = lambda d: (d.filename, d.url, d.sha256, d.requires_python, d.yanked, d.yanked_reason, d.metadata_url, d.metadata_sha256)
    assert sorted(map(key, from_json)) == sorted(map(key, from_html))
    assert len(from_json) == 3
    by = _by_name(from_html)
    assert by["demo-0.5-py3-none-any.whl"].yanked_reason == "bad <build>"
    assert by["demo-2.0-py3-none-any.whl"].requires_python == ">=3.99"
    assert all(d.sha256 == idx.sha256(d.filename) for d in from_html)
    with _OPENER.open(by["demo-1.0-py3-none-any.whl"].metadata_url, timeout=10) as r:
        assert hashlib.sha256(r.read()).hexdigest() == by["demo-1.0-py3-none-any.whl"].metadata_sha256


def _big_page(files, pad=300_000):
    import json as _json

    return _json.dumps({"meta": {"api-version": "1.1"}, "name": "big", "files": files,
                        "versions": ["1.0"], "pad": "x" * pad}).encode()


def _file(name, **extra):
    return {"filename": name, "url": f"https://files.example/{name}", "hashes": {"sha256": "0" * 64}, **extra}


def _keep_cp312(filename):
    return filename.endswith(".whl") and ("-cp312-" in filename or "-py3-none-any" in filename)


def test_a_big_page_decoded_in_part_gives_the_whole_decode_answer(tmp_path):
    """parse_simple_json_body skips the file objects the target cannot use; the answer equals
    decoding the page whole, including a kept object whose strings hold braces, quotes and the
    very text that starts a file object."""
    import json as _json

    from wheelhouse.index.pages import _kept_file_objects, parse_simple_json_body

    tricky = 'a {"filename": "evil-1.0-cp312-cp312-linux_x86_64.whl"} reason, with "quotes" and ] ['
    files = [_file(f"big-1.{i}-cp311-cp311-manylinux_2_17_x86_64.whl") for i in range(300)]
    files += [_file("big-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", yanked=tricky),
              _file("big-1.0-py3-none-any.whl", **{"requires-python": ">=3.9", "core-metadata": {"sha256": "1" * 64}}),
              _file("big-1.0.tar.gz")]
    body = _big_page(files)
    assert _kept_file_objects(body, _keep_cp312) is not None  # the partial decode was used
    got = parse_simple_json_body(body, "https://idx.example/simple/big/", "o", _keep_cp312)
    want = parse_simple_json(_json.loads(body), "https://idx.example/simple/big/", "o", _keep_cp312)
    assert got == want and [d.filename for d in got] == ["big-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", "big-1.0-py3-none-any.whl"]
    assert got[0].yanked_reason == tricky


def test_a_big_page_shaped_otherwise_is_decoded_whole():
    """Keys in another order, an escaped file name, or a broken page: the whole decode decides."""
    import json as _json

    import pytest

    from wheelhouse.index.pages import _kept_file_objects, parse_simple_json_body

    url_first = [{"url": f"https://files.example/big-1.{i}-py3-none-any.whl", "filename": f"big-1.{i}-py3-none-any.whl",
                  "hashes": {}} for i in range(50)]
    mixed = [_file(f"big-1.{i}-py3-none-any.whl") for i in range(50)] + url_first
    body = _big_page(mixed)
    assert _kept_file_objects(body, _keep_cp312) is None  # one object does not start with its name
    got = parse_simple_json_body(body, "https://idx.example/simple/big/", "o", _keep_cp312)
    assert len(got) == 100 and got == parse_simple_json(_json.loads(body), "https://idx.example/simple/big/", "o", _keep_cp312)
    escaped = _big_page([_file("big-1.0-py3-none-any.whl"), _file("big-\u00e9-1.0-py3-none-any.whl")])  # "\\u00e9" in the page
    assert _kept_file_objects(escaped, _keep_cp312) is None
    assert len(parse_simple_json_body(escaped, "https://idx.example/simple/big/", "o", _keep_cp312)) == 2
    cut = _big_page([_file(f"big-1.{i}-cp311-cp311-linux_x86_64.whl") for i in range(50)])[:-40] + b"}"
    with pytest.raises(ValueError):  # cut short (and closed by chance): refused, not read for fewer files
        parse_simple_json_body(cut, "https://i/", "o", _keep_cp312)
