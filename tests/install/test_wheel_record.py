"""RECORD parsing and rendering, and the archive paths a wheel may name (pure, no wheel needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelhouse.install.wheel.record import (
    UnsafeWheelPath,
    check_archive_path,
    check_archive_paths,
    check_inside,
    parse_record,
    record_digest,
    render_record,
)

WHEEL = Path("demo-1.0-py3-none-any.whl")


def test_parse_record_trusts_only_sha256():
    rows = parse_record(WHEEL, "a.py,sha256=abc,12\nb.py,md5=xyz,3\nc.py,,\n\n")
    assert rows == {"a.py": ("abc", 12), "b.py": (None, 3), "c.py": (None, None)}


def test_parse_record_reads_quoted_and_plain_rows_alike():
    """The plain-split fast path and csv give the same rows; quoting (a comma in a path) goes through csv."""
    plain = "a.py,sha256=abc,12\nb/c.py,sha256=d, 7 \nodd,sha256=e,\u00b2\n"
    assert parse_record(WHEEL, plain) == {"a.py": ("abc", 12), "b/c.py": ("d", 7), "odd": ("e", None)}
    quoted = '"x,y.py",sha256=q,1\r\na.py,sha256=abc,12\r\n'
    assert parse_record(WHEEL, quoted) == {"x,y.py": ("q", 1), "a.py": ("abc", 12)}


def test_render_record_is_relative_and_lists_itself_last(tmp_path):
    base = str(tmp_path)
    text = render_record([(f"{base}/pkg/a.py", "sha256=x", "3")], base, f"{base}/demo.dist-info/RECORD").decode()
    assert text == "pkg/a.py,sha256=x,3\ndemo.dist-info/RECORD,,\n"


def test_record_digest_has_no_padding():
    assert record_digest(b"\xff\xfe") == "__4"


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "C:/x", "a\\b", "a\x00b", "x/.."])
def test_unsafe_archive_paths_are_refused(name):
    with pytest.raises(UnsafeWheelPath):
        check_archive_path(WHEEL, name)
    # The whole listing at once (planning's way): refused wherever the name sits in it.
    for listing in ([name], ["pkg/a.py", name], ["pkg/a.py", name, "pkg/b.py"], ["a\n", name]):
        with pytest.raises(UnsafeWheelPath, match="unsafe path"):
            check_archive_paths(WHEEL, listing)


def test_safe_listings_pass_including_names_that_look_close():
    check_archive_paths(WHEEL, ["pkg/a.py", "pkg/..hidden", "pkg/a..b", "pkg/x:y", "a/b", "..\n"])
    check_archive_paths(WHEEL, [])


def test_destination_outside_its_folder_is_refused(tmp_path):
    check_inside(WHEEL, "pkg/a.py", str(tmp_path / "site" / "pkg" / "a.py"), str(tmp_path / "site"))
    with pytest.raises(UnsafeWheelPath):
        check_inside(WHEEL, "x", str(tmp_path / "elsewhere"), str(tmp_path / "site"))
