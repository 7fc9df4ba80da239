"""The one redaction function: URL credentials are replaced by ``***`` before anything is printed,
logged, cached or written; ``redact_config`` does the same, and more, for a configuration file that
is copied (a stack manifest into a wheelhouse).

Index credentials (``https://user:token@host/simple``, a ``-f`` URL, ``name @ https://...``) are
used for requests (wheelhouse.index.http keeps them in memory only) and never recorded: a
wheelhouse is uploaded as a dataset and copied to many boxes, and its JSON, lock, caches and
every message wh prints go through here.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping
from urllib.parse import unquote, urlsplit

__all__ = ["redact", "redact_data", "redact_config", "redact_settings", "is_secret_name", "known_secrets", "MASK",
           "SECRET_VARIABLES"]

MASK = "***"

# Variables whose value is a secret (the engine's API key) and whose URLs carry index credentials.
SECRET_VARIABLES = ("WH_API_KEY",)
_URL_VARIABLES = ("WH_INDEX_URL", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
_SHORTEST = 4  # a shorter "secret" would mask ordinary words

# RFC 3986: scheme "://" [userinfo "@"] host... The userinfo ends at the LAST "@" before the path
# (a raw "@" in a password is common), so the class excludes only what ends an authority.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s\"'<>]*)@")
# The same without a scheme (a URL typed without http://): "user:password@host".
_BARE_USERINFO = re.compile(r"(?<![\w.+\-/:@])[\w.+\-%~]+:[^\s/@\"'<>]+@(?=[\w\[])")


def known_secrets(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The secrets wh knows from ``env`` (default: the process's): the API key (``WH_API_KEY``) and the user
    and password of the index URLs (``WH_INDEX_URL``, ``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``), raw and
    percent-decoded; for text that shows them outside a URL (an engine echoing its argv into its log)."""
    env = os.environ if env is None else env
    found = [env.get(k) or "" for k in SECRET_VARIABLES]
    for k in _URL_VARIABLES:
        for url in (env.get(k) or "").split():
            try:
                parts = urlsplit(url)
            except ValueError:
                continue
            userinfo = parts.netloc.rpartition("@")[0]
            for piece in userinfo.split(":", 1) if userinfo else ():
                found += [piece, unquote(piece)]
    return tuple(sorted({s for s in found if len(s) >= _SHORTEST}, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the user:password part of every URL in it replaced by ``***``, and every one of
    ``secrets`` (e.g. :func:`known_secrets`) wherever it appears.

    Works on a bare URL and on text that contains URLs (an error message, a requirement
    ``name @ https://user:token@host/x.whl``); text without credentials comes back unchanged.
    """
    for secret in secrets:
        if len(secret) >= _SHORTEST and secret in text:
            text = text.replace(secret, MASK)
    if "@" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _BARE_USERINFO.sub(f"{MASK}@", text)


def redact_data(data: Any) -> Any:
    """A copy of JSON-like ``data`` (dicts, lists, tuples, strings) with every string redacted."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {redact_data(k): redact_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(redact_data(v) for v in data)
    return data


# Names of variables and flags that hold a secret: a word of the name (split at _ or -) is one of these.
_SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "APIKEY", "CREDENTIAL", "CREDENTIALS"})
_SECRET_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY"), ("AUTH", "KEY")})
# A TOML key (bare or quoted), "=", then a quoted string value: ``HF_TOKEN = "hf_..."`` (also inside an inline table).
_TOML_PAIR = re.compile(r"""(?P<key>(?<![\w\-])[A-Za-z0-9_\-]+|"[^"\n]*"|'[^'\n]*')(?P<eq>\s*=\s*)"""
                        r"""(?P<q>"|')(?P<value>(?:\\.|(?!(?P=q)).)*)(?P=q)""")
# A flag in an argv array followed by its value: ``"--api-key", "sk-..."``.
_ARGV_PAIR = re.compile(r"""(?P<flag>(?P<q1>"|')--?(?P<name>[A-Za-z0-9_\-]+)(?P=q1)\s*,\s*)"""
                        r"""(?P<q>"|')(?P<value>(?:\\.|(?!(?P=q)).)*)(?P=q)""")
# ``--api-key=sk-...`` inside one string, and a URL query parameter ``?token=...``.
_FLAG_VALUE = re.compile(r"(?P<head>(?:--?|[?&;])(?P<name>[A-Za-z0-9_\-]+)=)(?P<value>[^\s\"'&#]+)")
# A value that names where the secret comes from is no secret: "{api_key}", "${HF_TOKEN}", "".
_PLACEHOLDER = re.compile(r"\A(?:\{[\w.\-]*\}|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)?\Z")


def is_secret_name(name: str) -> bool:
    """Whether a variable, key or flag name says it holds a secret (``HF_TOKEN``, ``api-key``, ``--password``)."""
    words = [w for w in re.split(r"[_\-\s.]+", name.strip("\"' -").upper()) if w]
    return any(w in _SECRET_WORDS for w in words) or any(p in _SECRET_PAIRS for p in zip(words, words[1:]))


def _mask_value(value: str) -> str:
    return value if _PLACEHOLDER.match(value) else MASK


def redact_config(text: str) -> str:
    """``text`` of a TOML configuration with every secret in it replaced by ``***``.

    URL credentials (``redact``), the value of every key that names a secret (``HF_TOKEN = "..."``,
    ``api-key = "..."``), the value after such a flag in an argv array (``"--api-key", "..."``) or
    after ``=`` (``--token=...``, ``?token=...``). A placeholder (``"{api_key}"``, ``"${HF_TOKEN}"``)
    is kept: it names where the secret comes from. The text stays valid TOML of the same shape.
    """
    text = redact(text)
    text = _TOML_PAIR.sub(lambda m: (m.group("key") + m.group("eq") + m.group("q") + _mask_value(m.group("value"))
                                     + m.group("q")) if is_secret_name(m.group("key")) else m.group(0), text)
    text = _ARGV_PAIR.sub(lambda m: (m.group("flag") + m.group("q") + _mask_value(m.group("value")) + m.group("q"))
                          if is_secret_name(m.group("name")) else m.group(0), text)
    return _mask_flag_value(text)


def _mask_flag_value(text: str) -> str:
    return _FLAG_VALUE.sub(lambda m: m.group("head") + _mask_value(m.group("value"))
                           if is_secret_name(m.group("name")) else m.group(0), redact(text))


def redact_settings(data: Any) -> Any:
    """A copy of parsed settings (a manifest's ``[serve]``: dicts, lists, strings) with every secret masked.

    What ``redact_config`` masks in the text, in the data: URL credentials, the value of a key that
    names a secret, the argv item after such a flag (``["--api-key", "..."]``) and ``--token=...``.
    """
    if isinstance(data, str):
        return _mask_flag_value(data)
    if isinstance(data, dict):
        return {k: (_mask_value(v) if isinstance(v, str) and isinstance(k, str) and is_secret_name(k)
                    else redact_settings(v)) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        out, secret_next = [], False
        for v in data:
            if secret_next and isinstance(v, str):
                out.append(_mask_value(v))
            else:
                out.append(redact_settings(v))
            secret_next = isinstance(v, str) and v.startswith("-") and "=" not in v and is_secret_name(v)
        return type(data)(out)
    return data
