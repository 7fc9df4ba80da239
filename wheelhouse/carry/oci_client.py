"""A session with one OCI registry repository, through oras-py (the ``oci`` extra).

oras-py's ``Registry`` does the requests and the token dance (``Www-Authenticate: Bearer``);
its high-level ``push``/``pull`` do not fit a wheelhouse (``pull`` writes each blob straight to
its final name and never checks a digest; ``push`` reads a whole blob into memory and does not
say which blobs it skipped), so wh calls the blob and manifest operations one by one and does
the verifying, counting and naming itself (wheelhouse.carry.oci).

Before anything else, ``connect`` asks ``/v2/`` once (the distribution spec's version check),
over https first (verified: never an unchecked certificate), then plain http for a loopback
registry or with ``--insecure``: an unreachable registry fails in seconds, not after oras'
retries, and a ``Basic`` challenge
(an htpasswd registry) gets the docker config's credentials on the session itself, so every
request carries them once instead of being answered 401 first.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import importlib
from pathlib import Path
from typing import Iterator

from wheelhouse.errors import UsageError, WhError
from wheelhouse.redact import redact

from .oci_auth import Credentials, docker_config_path, find_credentials
from .oci_ref import OciRef

__all__ = [
    "RegistryError",
    "RegistryAuthError",
    "OciExtraMissing",
    "RegistryClient",
    "connect",
    "connect_pool",
    "need_oras",
    "OCI_MANIFEST",
    "MAX_MANIFEST_BYTES",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MAX_MANIFEST_BYTES = 4 << 20  # what registries accept (distribution's default limit)
_SMALL_BLOB = 16 << 20  # up to this, one PUT; larger blobs go up in chunks (never whole in memory)
_CHUNK = 64 << 20
_READ = 1 << 20
_TIMEOUT = (10.0, 120.0)  # connect, read: a registry that stops answering is an error, not a hang


class RegistryError(WhError):
    """The registry could not be reached, or refused or failed a request."""

    code = "registry"


class RegistryAuthError(RegistryError):
    code = "registry-auth"


class OciExtraMissing(UsageError):
    code = "missing-extra"


def need_oras(command: str) -> None:
    """Refuse, naming the extra to install, where oras-py is missing."""
    try:
        importlib.import_module("oras.provider")
    except ImportError:
        raise OciExtraMissing(f"`{command}` needs the oci extra (oras-py), which is not installed",
                              hint="pip install 'wh[oci]'") from None


def _registry_class():
    """oras' Registry with fewer, shorter retries (its default sleeps ~2 minutes on a dropped link)."""
    import oras.decorator
    import oras.provider

    class _Registry(oras.provider.Registry):
        do_request = oras.decorator.retry(attempts=2, timeout=1)(oras.provider.Registry.do_request.__wrapped__)

    return _Registry


def _adapter():
    """A requests adapter with wh's TLS trust (wheelhouse.tls) and a default timeout."""
    from requests.adapters import HTTPAdapter

    from wheelhouse.tls import ssl_context

    class _WhAdapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            kwargs["ssl_context"] = ssl_context()
            return super().init_poolmanager(*args, **kwargs)

        def send(self, request, **kwargs):
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = _TIMEOUT
            return super().send(request, **kwargs)

    return _WhAdapter()


def _error_text(response) -> str:
    """The registry's own words for a failed request (distribution spec error JSON), kept short."""
    try:
        errors = response.json().get("errors") or []
        words = "; ".join(f"{e.get('code', '')}: {e.get('message', '')}".strip(": ") for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError):
        words = ""
    return redact(words or f"HTTP {response.status_code} {response.reason or ''}".strip())


class RegistryClient:
    """One repository of one registry. ``requests`` counts every HTTP request by method."""

    def __init__(self, ref: OciRef, registry, container, scheme: str, credentials: Credentials | None = None):
        self.ref = ref
        self._registry = registry
        self._container = container
        self._scheme = scheme
        self.credentials = credentials  # kept for twins (connect_pool); its repr hides the secret
        self.requests: collections.Counter[str] = collections.Counter()
        registry.session.hooks["response"].append(self._count)

    def _count(self, response, *args, **kwargs):
        self.requests[response.request.method] += 1

    def _url(self, path: str) -> str:
        return f"{self._scheme}://{path}"

    def _request(self, url: str, method: str, **kw):
        import requests

        try:
            return self._registry.do_request(url, method, **kw)
        except (requests.RequestException, ValueError) as exc:
            raise RegistryError(f"{self.ref.host}: {method} failed ({redact(str(exc))})",
                                hint="check the registry is up and reachable, then run the same command again") from exc

    # --- blobs -------------------------------------------------------------------------------
    def exists(self, digest: str) -> bool:
        """HEAD the blob: present in this repository (uploading it again would change nothing)."""
        r = self._request(self._url(self._container.get_blob_url(digest)), "HEAD")
        if r.status_code == 200:
            return True
        if r.status_code == 404:
            return False
        raise RegistryError(f"{self.ref.host}: checking blob {digest} failed: {_error_text(r)}",
                            hint="check your access to the repository (docker login)")

    def upload(self, path: Path, digest: str, size: int) -> None:
        """Upload the file at ``path`` as the blob ``digest`` (the registry checks the digest too)."""
        import requests

        layer = {"digest": digest, "size": size, "mediaType": "application/octet-stream"}
        try:
            if size <= _SMALL_BLOB:
                r = self._registry.put_upload(str(path), self._container, layer)
            else:
                r = self._registry.chunked_upload(str(path), self._container, layer, chunk_size=_CHUNK)
        except (requests.RequestException, ValueError) as exc:
            raise RegistryError(f"{self.ref.host}: uploading {path.name} ({digest}) failed ({redact(str(exc))})",
                                hint="run the same `wh push` again: blobs already uploaded are skipped") from exc
        if r.status_code not in (200, 201, 202):
            raise RegistryError(f"{self.ref.host}: uploading {path.name} ({digest}) was refused: {_error_text(r)}",
                                hint="check your push access to the repository (docker login)")

    @contextlib.contextmanager
    def open_blob(self, digest: str, what: str) -> Iterator[Iterator[bytes]]:
        """The blob's bytes as they come, undecoded (a digest is over the stored bytes)."""
        import requests

        r = self._request(self._url(self._container.get_blob_url(digest)), "GET", stream=True)
        try:
            if r.status_code == 404:
                raise RegistryError(f"{self.ref}: blob {digest} ({what}) is missing from the registry",
                                    hint="push the wheelhouse again (`wh push WH REF`), then pull")
            if r.status_code != 200:
                raise RegistryError(f"{self.ref.host}: fetching {what} ({digest}) failed: {_error_text(r)}",
                                    hint="check your access to the repository (docker login)")

            def chunks() -> Iterator[bytes]:
                try:
                    yield from r.raw.stream(_READ, decode_content=False)
                except (requests.RequestException, OSError, Exception) as exc:  # urllib3's own errors too
                    if isinstance(exc, WhError):
                        raise
                    raise RegistryError(f"{self.ref.host}: the download of {what} broke off ({redact(str(exc))})",
                                        hint="run the same command again: what was verified is kept") from exc

            yield chunks()
        finally:
            r.close()

    # --- manifests ---------------------------------------------------------------------------
    def put_manifest(self, body: bytes, reference: str) -> str:
        """Store the manifest under ``reference`` (a tag); returns its digest, checked against the registry's."""
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        r = self._request(self._url(self._container.manifest_url(reference)), "PUT", data=body,
                          headers={"Content-Type": OCI_MANIFEST})
        if r.status_code not in (200, 201):
            raise RegistryError(f"{self.ref}: the registry refused the manifest: {_error_text(r)}",
                                hint="the registry must accept OCI image manifests (OCI 1.1 artifacts)")
        told = r.headers.get("Docker-Content-Digest")
        if told and told != digest:
            raise RegistryError(f"{self.ref}: the registry stored the manifest as {told}, wh sent {digest}",
                                hint="the registry or a proxy changed the manifest; push again")
        return digest

    def get_manifest(self) -> tuple[bytes, str]:
        """The manifest's bytes and digest; by digest, the bytes are checked to hash to it."""
        r = self._request(self._url(self._container.manifest_url(self.ref.reference)), "GET",
                          headers={"Accept": OCI_MANIFEST})
        if r.status_code == 404:
            raise RegistryError(f"{self.ref}: no such wheelhouse in the registry (manifest not found)",
                                hint=f"check the tag, or publish it: wh push WH {self.ref}")
        if r.status_code != 200:
            raise RegistryError(f"{self.ref}: fetching the manifest failed: {_error_text(r)}",
                                hint="check your access to the repository (docker login)")
        body = r.content
        if len(body) > MAX_MANIFEST_BYTES:
            raise RegistryError(f"{self.ref}: the manifest is {len(body)} bytes, more than a wheelhouse's can be",
                                hint="this is not a wheelhouse pushed by wh")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if self.ref.digest and digest != self.ref.digest:
            raise RegistryError(f"{self.ref}: the registry sent a manifest whose digest is {digest}",
                                hint="the registry's storage or a proxy is corrupting data; do not use it")
        return body, digest


def _challenge(response) -> str:
    return (response.headers.get("Www-Authenticate") or "").split(" ", 1)[0].lower()


def _new_registry(ref: OciRef, scheme: str):
    registry = _registry_class()(hostname=ref.host, insecure=scheme == "http", auth_backend="token")
    adapter = _adapter()
    registry.session.mount("https://", adapter)
    registry.session.mount("http://", adapter)
    return registry


def _reach(ref: OciRef, insecure: bool):
    """(registry, scheme, first /v2/ answer). https first, always verified; plain http after it only for a
    loopback registry or with ``insecure`` (as docker treats its insecure registries)."""
    import requests

    schemes = ("https", "http") if insecure or ref.is_loopback else ("https",)
    failures: list[tuple[str, Exception]] = []
    for scheme in schemes:
        registry = _new_registry(ref, scheme)
        try:
            r = registry.session.get(f"{scheme}://{ref.host}/v2/")
        except requests.RequestException as exc:
            failures.append((scheme, exc))
            continue
        if r.status_code in (200, 401):
            return registry, scheme, r
        if not failures:  # https answered, but not as a registry
            failures.append((scheme, RegistryError(f"HTTP {r.status_code}")))
        elif scheme == "http":  # plain http reached a TLS port (Go answers 400): the TLS failure is the news
            break
    scheme, exc = next(((s, e) for s, e in failures if isinstance(e, requests.exceptions.SSLError)), failures[0])
    if isinstance(exc, requests.exceptions.SSLError):
        raise RegistryError(f"TLS with registry {ref.host} failed ({redact(str(exc))})",
                            hint="set WH_CA_BUNDLE=/path/to/ca.pem for a private CA"
                                 + ("" if len(schemes) > 1 else ", or --insecure for a registry on plain http")) from exc
    if isinstance(exc, RegistryError):
        raise RegistryError(f"https://{ref.host}/v2/ answered {exc}: not an OCI registry API",
                            hint="check the host and port of the registry")
    raise RegistryError(f"cannot reach registry {ref.host} over {' or '.join(schemes)} ({redact(str(exc))})",
                        hint="check the host and port" + ("" if len(schemes) > 1 else
                                                          "; a registry on plain http needs --insecure")) from exc


def _authenticate(registry, ref: OciRef, scheme: str, answer, credentials: Credentials | None) -> Credentials | None:
    """Docker-config credentials on the session for a ``Basic`` registry (checked at once), or handed to
    oras' token flow for a ``Bearer`` one; returns those used."""
    if answer.status_code != 401:
        return None
    creds = credentials or find_credentials(ref.host)
    kind = _challenge(answer)
    if kind == "basic":
        if creds is None:
            raise RegistryAuthError(
                f"registry {ref.host} asks for credentials and {docker_config_path()} has none for it",
                hint=f"docker login {ref.host}  (or add {ref.host} to the auths of $DOCKER_CONFIG/config.json)")
        registry.session.auth = (creds.username, creds.secret)
        if registry.session.get(f"{scheme}://{ref.host}/v2/").status_code == 401:
            raise RegistryAuthError(f"registry {ref.host} refused the credentials for {creds.username} from {creds.source}",
                                    hint=f"docker login {ref.host}  (then run the same command again)")
    elif creds is not None:  # Bearer: oras asks the token service with these credentials
        registry.auth.set_basic_auth(creds.username, creds.secret)
    return creds


def connect(ref: OciRef, *, insecure: bool = False, command: str = "wh pull",
            credentials: Credentials | None = None) -> RegistryClient:
    """A client for ``ref``'s repository: registry reachable, credentials (docker config) accepted.

    HTTPS with wh's TLS trust (WH_CA_BUNDLE for a private CA); plain http only for a loopback
    registry or with ``insecure``, and only where https is not spoken.
    """
    need_oras(command)
    import oras.container
    import requests

    registry, scheme, answer = _reach(ref, insecure)
    try:
        creds = _authenticate(registry, ref, scheme, answer, credentials)
    except requests.RequestException as exc:
        raise RegistryError(f"cannot reach registry {ref.host} ({redact(str(exc))})",
                            hint="check the registry is up, then run the same command again") from exc
    name = f"{ref.repository}@{ref.digest}" if ref.digest else f"{ref.repository}:{ref.tag}"
    container = oras.container.Container(name, registry=ref.host)
    container.registry = ref.host  # "team.ml/stack" must not be read as a registry host
    return RegistryClient(ref, registry, container, scheme, creds)


def connect_pool(ref: OciRef, jobs: int, *, insecure: bool = False, command: str = "wh pull") -> list[RegistryClient]:
    """``jobs`` clients of one repository, each with a session of its own (requests' sessions are not
    meant to be shared by threads); the docker config is read once."""
    first = connect(ref, insecure=insecure, command=command)
    return [first] + [connect(ref, insecure=insecure, command=command, credentials=first.credentials)
                      for _ in range(max(0, jobs - 1))]
