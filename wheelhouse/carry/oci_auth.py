"""Registry credentials from the usual docker config: ``$DOCKER_CONFIG/config.json`` (default
``~/.docker/config.json``): ``auths`` entries, ``credHelpers`` and ``credsStore`` (the
``docker-credential-<name> get`` protocol).

Credentials stay in memory: ``Credentials`` never shows its secret in ``repr``/``str``, and
nothing here prints, logs or writes one. oras-py reads ``~/.docker/config.json`` too, but not
``DOCKER_CONFIG``, and merges several files in no fixed order; docker itself reads exactly one
file, so wh does the same and hands the result to the client.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from wheelhouse.errors import UsageError

__all__ = ["Credentials", "docker_config_path", "find_credentials", "BadDockerConfig"]

_HELPER_TIMEOUT = 30.0


class BadDockerConfig(UsageError):
    code = "bad-docker-config"


@dataclass(frozen=True)
class Credentials:
    """A user name and its secret (a password or token), and where they were found."""

    username: str
    secret: str = field(repr=False)
    source: str = ""

    def __str__(self) -> str:
        return f"credentials for {self.username} ({self.source})"


def docker_config_path() -> Path:
    """``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json`` (docker's own rule)."""
    folder = os.environ.get("DOCKER_CONFIG")
    return Path(folder) / "config.json" if folder else Path.home() / ".docker" / "config.json"


def _aliases(host: str) -> list[str]:
    """The keys a docker config may use for ``host``: as is, with a scheme, and localhost <-> 127.0.0.1."""
    hosts = [host]
    if host.startswith("localhost"):
        hosts.append("127.0.0.1" + host[len("localhost"):])
    elif host.startswith("127.0.0.1"):
        hosts.append("localhost" + host[len("127.0.0.1"):])
    return hosts


def _key_host(key: str) -> str:
    """An ``auths`` key as a bare host[:port]: docker writes ``https://host/v1/`` for some registries."""
    for scheme in ("https://", "http://"):
        if key.startswith(scheme):
            key = key[len(scheme):]
    return key.split("/", 1)[0]


def _from_entry(entry: dict, source: str) -> Credentials | None:
    if not isinstance(entry, dict):
        return None
    if entry.get("auth"):
        try:
            user, _, secret = base64.b64decode(str(entry["auth"]), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise BadDockerConfig(f"{source}: an auths entry's \"auth\" is not base64 of user:password",
                                  hint="run `docker login HOST` again to rewrite it") from None
        return Credentials(user, secret, source)
    if entry.get("username") and entry.get("password"):
        return Credentials(str(entry["username"]), str(entry["password"]), source)
    return None


def _from_helper(helper: str, host: str, source: str) -> Credentials | None:
    """``docker-credential-<helper> get`` with the host on stdin, as docker runs it."""
    binary = f"docker-credential-{helper}"
    try:
        proc = subprocess.run([binary, "get"], input=host, capture_output=True, text=True, timeout=_HELPER_TIMEOUT)
    except FileNotFoundError:
        raise BadDockerConfig(f"{source} names the credential helper {binary}, which is not on PATH",
                              hint=f"install {binary}, or remove it from {source}") from None
    except subprocess.TimeoutExpired:
        raise BadDockerConfig(f"credential helper {binary} did not answer within {_HELPER_TIMEOUT:.0f}s",
                              hint=f"run `echo {host} | {binary} get` to see why") from None
    if proc.returncode != 0:
        return None  # "credentials not found in native keychain": anonymous, as docker goes on
    try:
        data = json.loads(proc.stdout)
        return Credentials(str(data["Username"]), str(data["Secret"]), f"{binary}")
    except (ValueError, KeyError, TypeError):
        raise BadDockerConfig(f"credential helper {binary} answered something that is not its JSON",
                              hint=f"run `echo {host} | {binary} get` to see why") from None


def find_credentials(host: str, config: Path | None = None) -> Credentials | None:
    """The credentials docker would use for ``host`` (host[:port]), or None (anonymous)."""
    path = config or docker_config_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except RecursionError:
        raise BadDockerConfig(f"{path} nests too deep to be a docker config", hint=f"fix or remove {path}") from None
    except (OSError, ValueError) as exc:
        raise BadDockerConfig(f"{path} cannot be read as JSON ({exc})", hint=f"fix or remove {path}") from None
    if not isinstance(data, dict):
        raise BadDockerConfig(f"{path} is not a JSON object", hint=f"fix or remove {path}")
    source = str(path)
    helpers = data.get("credHelpers") or {}
    auths = {_key_host(k): v for k, v in (data.get("auths") or {}).items()}
    for name in _aliases(host):
        if isinstance(helpers, dict) and helpers.get(name):
            return _from_helper(str(helpers[name]), name, source)
    for name in _aliases(host):
        found = _from_entry(auths.get(name), source) if name in auths else None
        if found is not None:
            return found
    if data.get("credsStore"):
        return _from_helper(str(data["credsStore"]), host, source)
    return None
