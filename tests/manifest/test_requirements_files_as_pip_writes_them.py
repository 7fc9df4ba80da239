"""Requirements files as pip writes them (issue 30, finding 6): nested -r/-c followed relative to the file,
--pre / index options honoured, what wh cannot do refused with the reason, an empty file an empty request."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelhouse.manifest.requirements_file import RequirementsFileError, read_requirements_files


def _read(*paths, **kw):
    return read_requirements_files([str(p) for p in paths], lambda p: Path(p).read_text(), **kw)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_nested_files_are_followed_relative_to_the_file_that_names_them(tmp_path):
    _write(tmp_path / "reqs" / "base.txt", "lib>=1\n-c pins.txt\n")
    _write(tmp_path / "reqs" / "pins.txt", "lib==1.2\n-r more.txt\n")  # -r inside -c: constraints too (pip)
    _write(tmp_path / "reqs" / "more.txt", "other<3\n")
    top = _write(tmp_path / "top.txt", "app\n-r reqs/base.txt\n--requirement=reqs/base.txt\n")
    got = _read(top)
    assert [line.text for line in got.requirements] == ["app", "lib>=1"]
    assert [line.text for line in got.constraints] == ["lib==1.2", "other<3"]
    assert got.requirements[1].where.endswith("base.txt line 1")


def test_pre_and_index_options_are_honoured(tmp_path):
    _write(tmp_path / "wheels" / "x.txt", "")
    f = _write(tmp_path / "r.txt", "--pre\n-i http://main.test/simple\n--extra-index-url http://extra.test/simple\n"
                                   "-f wheels\n--find-links=http://links.test/\n--only-binary :all:\n--prefer-binary\napp\n")
    got = _read(f)
    assert got.prereleases and got.index_url == "http://main.test/simple"
    assert got.extra_index_urls == ("http://extra.test/simple",)
    assert got.find_links == (str(tmp_path / "wheels"), "http://links.test/")
    assert [line.text for line in got.requirements] == ["app"] and not got.notes


@pytest.mark.parametrize("line, reason", [
    ("-e ./src", "wh stages wheels only"),
    ("--no-binary :all:", "wh stages wheels only"),
    ("--trusted-host mirror.test", "PIP_TRUSTED_HOST"),
    ("--frobnicate", "not supported in a requirements file"),
])
def test_what_wh_cannot_do_is_refused_with_the_reason(tmp_path, line, reason):
    f = _write(tmp_path / "r.txt", f"app\n{line}\n")
    with pytest.raises(RequirementsFileError) as err:
        _read(f)
    assert err.value.message.startswith(f"-r {f} line 2: ") and reason in err.value.message


def test_an_empty_file_is_an_empty_request_with_a_note(tmp_path):
    f = _write(tmp_path / "empty.txt", "# nothing yet\n\n")
    got = _read(f)
    assert got.requirements == () and got.notes == (f"-r {f} lists no requirements: nothing is asked of it",)


def test_a_file_named_twice_or_in_a_cycle_is_read_once(tmp_path):
    a = _write(tmp_path / "a.txt", "x\n-r b.txt\n")
    _write(tmp_path / "b.txt", "y\n-r a.txt\n")
    assert [line.text for line in _read(a, a).requirements] == ["x", "y"]
