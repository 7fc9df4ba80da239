"""``oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]``: where a wheelhouse lives in an OCI registry.

Parsing is pure. The grammar is the distribution spec's (repository path components, tag,
digest); a reference without a tag or digest means ``latest``, as docker and oras read it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from wheelhouse.errors import UsageError

__all__ = ["OciRef", "BadReference", "parse_ref", "is_oci_ref", "SCHEME"]

SCHEME = "oci://"

# distribution-spec: path components joined by "/", tag, digest (sha256 only: the one wh verifies).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPO = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                   r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")

_EXAMPLE = "oci://registry.internal:5000/team/stack:v1"


class BadReference(UsageError):
    code = "bad-reference"


@dataclass(frozen=True)
class OciRef:
    """A parsed reference. ``host`` keeps its port (``127.0.0.1:5000``), as registries and docker
    config files name it."""

    host: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """What the manifest is asked for by: the digest when given (immutable), else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def hostname(self) -> str:
        """The host without its port (and without brackets for IPv6)."""
        host = self.host
        if host.startswith("["):
            return host[1:host.index("]")]
        return host.rsplit(":", 1)[0] if ":" in host else host

    @property
    def is_loopback(self) -> bool:
        """localhost or a loopback address: plain http is the default there (as docker treats it)."""
        name = self.hostname
        if name == "localhost":
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        text = f"{SCHEME}{self.host}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    def with_digest(self, digest: str) -> "OciRef":
        return OciRef(self.host, self.repository, self.tag, digest)


def is_oci_ref(text: str) -> bool:
    return str(text).startswith(SCHEME)


def parse_ref(text: str) -> OciRef:
    """``oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]`` as an OciRef; anything else is bad input."""
    text = str(text)
    if not text.startswith(SCHEME):
        raise BadReference(f"{text!r} is not an oci:// reference", hint=f"write it as {_EXAMPLE}")
    rest = text[len(SCHEME):]
    if "@" in rest.split("/", 1)[0]:
        # user:password@host: credentials come from the docker config, never from a reference
        raise BadReference("an oci:// reference must not carry credentials",
                           hint="run `docker login HOST` (or add HOST to ~/.docker/config.json auths) instead")
    host, sep, path = rest.partition("/")
    if not sep or not _HOST.fullmatch(host):
        raise BadReference(f"{text!r}: expected a registry host before the repository", hint=f"e.g. {_EXAMPLE}")
    digest = None
    if "@" in path:
        path, _, digest = path.partition("@")
        if not _DIGEST.fullmatch(digest):
            raise BadReference(f"{text!r}: the digest must be sha256: and 64 lowercase hex digits",
                               hint=f"e.g. {SCHEME}{host}/team/stack@sha256:<64 hex>")
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, _, tag = path.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise BadReference(f"{text!r}: tag {tag!r} is not a valid tag (letters, digits, _ . -; at most 128)",
                               hint=f"e.g. {_EXAMPLE}")
    if not _REPO.fullmatch(path):
        raise BadReference(f"{text!r}: repository {path!r} is not valid (lowercase letters, digits, . _ - and /)",
                           hint=f"e.g. {_EXAMPLE}")
    if tag is None and digest is None:
        tag = "latest"
    return OciRef(host=host, repository=path, tag=tag, digest=digest)
