"""parse_metadata: the fast path for plain header blocks answers exactly what the stdlib email
parser answers, and anything unusual goes to the stdlib parser."""

from __future__ import annotations

from email.parser import BytesParser

import pytest
from packaging.utils import canonicalize_name

from wheelhouse.index.metadata import MetadataError, _plain_headers, parse_metadata


def _stdlib(raw: bytes):
    msg = BytesParser().parsebytes(raw, headersonly=True)
    rp = msg.get("Requires-Python")
    return (canonicalize_name(str(msg.get("Name"))), str(msg.get("Version")).strip(),
            tuple(str(r).strip() for r in (msg.get_all("Requires-Dist") or ())),
            (str(rp).strip() or None) if rp else None, tuple(str(e).strip() for e in (msg.get_all("Provides-Extra") or ())))


def _ours(raw: bytes):
    m = parse_metadata(raw)
    return m.name, m.version, m.requires_dist, m.requires_python, m.provides_extra


PLAIN = (b"Metadata-Version: 2.4\nName: Demo_Pkg\nVersion: 1.0.post1 \nRequires-Python: >=3.10\n"
         b"Requires-Dist: torch==2.11.0\nRequires-Dist: numpy; extra == \"np\"\nProvides-Extra: np\n"
         b"Description-Content-Type: text/markdown\n\n# Demo\nRequires-Dist: not-a-header-in-the-body\n")

CASES = {
    "plain": PLAIN,
    "crlf": PLAIN.replace(b"\n", b"\r\n"),
    "folded": PLAIN.replace(b"Requires-Dist: torch==2.11.0\n", b"Requires-Dist: torch\n  ==2.11.0\n"),
    "non-ascii": PLAIN.replace(b"Version: 1.0.post1 \n", "Version: 1.0.post1\nAuthor: José\n".encode()),
    "no body": PLAIN.split(b"\n\n")[0],
    "lower-case names": PLAIN.replace(b"Requires-Dist:", b"requires-dist:"),
    "tabs after colon": PLAIN.replace(b"Name: ", b"Name:\t"),
    "empty requires-python": PLAIN.replace(b">=3.10", b""),
    "a line that is no header": PLAIN.replace(b"Provides-Extra: np\n", b"Provides-Extra: np\nnot a header\n"),
}


@pytest.mark.parametrize("raw", CASES.values(), ids=CASES.keys())
def test_same_answers_as_the_stdlib_parser(raw):
    assert _ours(raw) == _stdlib(raw)


def test_the_fast_path_takes_plain_blocks_only():
    assert _plain_headers(PLAIN.split(b"\n\n")[0] + b"\n\n") is not None
    for case in ("crlf", "folded", "non-ascii", "a line that is no header"):
        assert _plain_headers(CASES[case]) is None, case


def test_the_body_is_never_read_as_headers():
    assert "not-a-header-in-the-body" not in " ".join(parse_metadata(PLAIN).requires_dist)
    assert parse_metadata(PLAIN).raw == PLAIN  # the whole file is kept


def test_name_and_version_are_required():
    with pytest.raises(MetadataError, match="lacks Name or Version"):
        parse_metadata(b"Name: x\n\n")
