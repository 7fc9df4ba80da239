"""wheelhouse.index.http.messages: case-insensitive headers, responses, and HTTP errors that carry
the status, a hint for the next step, and no credentials."""

from __future__ import annotations

import pytest

import wheelhouse
from wheelhouse.errors import WhError
from wheelhouse.index.http.messages import Headers, HttpError, Response, ResponseTooLarge, StreamResponse, user_agent


def test_headers_are_case_insensitive_and_repeats_are_joined():
    h = Headers([("Content-Type", "text/html"), ("Vary", "Accept"), ("vary", "Accept-Encoding")])
    assert h["content-type"] == h["CONTENT-TYPE"] == h.get("Content-Type") == "text/html"
    assert h["Vary"] == "Accept, Accept-Encoding"  # RFC 9110 list-valued fields
    assert "ETAG" not in h and "vary" in h and 1 not in h
    assert h.get("ETag", "none") == "none"
    assert Headers({"ETag": '"x"'}) == {"etag": '"x"'}


def test_response_json_and_stream_read():
    r = Response("http://127.0.0.1/simple/a/", 200, Headers(), b'{"files": []}')
    assert r.json() == {"files": []}

    def chunks(size):
        data = b"abcdefghij"
        for i in range(0, len(data), size):
            yield data[i:i + size]

    s = StreamResponse("u", 206, Headers(), chunks)
    assert list(s.iter_chunks(4)) == [b"abcd", b"efgh", b"ij"]
    assert s.read() == b"abcdefghij"


@pytest.mark.parametrize(
    "status, hint_has",
    [(404, "--index-url"), (401, "credentials"), (403, "credentials"), (503, "network"), (None, "network")],
)
def test_http_error_says_what_failed_and_what_to_do(status, hint_has):
    err = HttpError("https://alice:tok3n@127.0.0.1:8080/simple/demo/", status, "nope", received=42)
    assert isinstance(err, WhError)
    assert err.status == status and err.received == 42 and err.reason == "nope"
    text = str(err)
    assert "tok3n" not in text and "127.0.0.1:8080/simple/demo/" in text
    assert (f"HTTP {status}" if status else "connection failed") in text
    assert hint_has in err.hint


def test_an_explicit_hint_wins():
    assert HttpError("http://127.0.0.1/", 404, "x", hint="do this").hint == "do this"


def test_response_too_large_names_the_size_and_the_knob():
    err = ResponseTooLarge("http://127.0.0.1/simple/big/", 200 << 20, 64 << 20)
    assert isinstance(err, HttpError) and err.limit == 64 << 20
    assert "200.0 MiB" in str(err) and "64 MiB" in str(err) and "WH_MAX_PAGE_MB" in err.hint
    unknown = ResponseTooLarge("http://127.0.0.1/simple/big/", None, 1 << 20)
    assert "more than 1 MiB" in str(unknown)
    assert err.code == "response-too-large"


def test_user_agent_names_wh_and_its_version():
    assert user_agent() == f"wh/{wheelhouse.__version__}"
