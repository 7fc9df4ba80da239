"""wh push / wh pull against a real OCI registry on 127.0.0.1 (tests/support/registry.py: Debian's
docker-registry), with wheelhouses made by the real `wh stage` from a find-links folder of real wheels.

What a user would notice: the pulled wheelhouse is the pushed one byte for byte; a second wheelhouse
sharing wheels uploads only what is new (counted by wh and by the registry's own access log); a blob
damaged in the registry's storage is refused by name and nothing appears under -o; a killed pull
fetches only the rest when run again; docker-config credentials reach an htpasswd registry and never
show in any output; `wh install oci://...` installs what was pushed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from faults import run_with_fault, wh_command
from registry import start_registry
from wheelmaker import make_wheel

pytest.importorskip("oras", reason="the oci extra (oras-py) is not installed")

from wheelhouse.carry.oci_layout import ARTIFACT_TYPE, NotAWheelhouseArtifact, parse_manifest  # noqa: E402
from wheelhouse.carry.oci_ref import BadReference, parse_ref  # noqa: E402
from wheelhouse.lock import read_wh_json, write_wh_json  # noqa: E402
from wheelhouse.lock.writer import with_owned  # noqa: E402


def wh(*args, env=None, **kw) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(wh_command(args), capture_output=True, text=True, env=full_env, timeout=300, **kw)


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes): equal dicts = byte-identical trees."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def oci_registry(tmp_path):
    reg = start_registry(tmp_path / "registry")
    yield reg
    reg.stop()


@pytest.fixture
def pub(tmp_path):
    """A find-links folder: a big shared wheel (core), and the wheels of two stacks around it."""
    folder = tmp_path / "pub"
    make_wheel(folder, "core", "2.0", modules={"core/__init__.py": "V = 2\n"}, pad_bytes=300_000)
    make_wheel(folder, "web", "1.0", requires=["core>=2"], modules={"web/__init__.py": "import core\nV = core.V\n"})
    make_wheel(folder, "api", "1.0", requires=["core>=2"], modules={"api/__init__.py": "import core\n"},
               pad_bytes=20_000)
    return folder


def stage(tmp_path: Path, pub: Path, name: str, *reqs: str) -> Path:
    """A wheelhouse staged as `wh stage REQS -f PUB -o OUT --no-bootstrap --cache-dir CACHE` would stage it (run in
    this process: it is the setup, not what is tested), with a bootstrap/ folder (two wheels and its own lock) added."""
    from wheelhouse.lock import LockedFile
    from wheelhouse.stage import StageFlags, merge_inputs, stage as run_stage
    from wheelhouse.stage.bootstrap import write_bootstrap

    out = tmp_path / name
    flags = StageFlags(requirements=reqs, find_links=(str(pub),))
    run_stage(merge_inputs(None, flags, out, cache_dir=tmp_path / "cache", bootstrap=False))

    boot = out / "bootstrap"
    boot.mkdir()
    files = []
    for dist in ("wh", "click"):  # made once: every wheelhouse of one wh carries the same bootstrap bytes
        made = list((tmp_path / "boot-src").glob(f"{dist}-*.whl")) or [
            make_wheel(tmp_path / "boot-src", dist, "8.1", modules={f"{dist}_boot/__init__.py": f"N = {dist!r}\n"})]
        w = boot / made[0].name
        w.write_bytes(made[0].read_bytes())
        files.append(LockedFile(name=dist, version="8.1", filename=w.name, path=w.name,
                                sha256=hashlib.sha256(w.read_bytes()).hexdigest(), size=w.stat().st_size))
    write_bootstrap(boot, files, requires_python=None, environments=())
    write_wh_json(out, with_owned(read_wh_json(out), ["bootstrap"]))
    return out


def raw_manifest(reg, repo: str, tag: str) -> dict:
    req = urllib.request.Request(f"http://{reg.host}/v2/{repo}/manifests/{tag}",
                                 headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


# --- push, pull ------------------------------------------------------------------------------------

def test_push_then_pull_gives_byte_identical_files(oci_registry, pub, tmp_path):
    house = stage(tmp_path, pub, "house", "web")
    ref = oci_registry.ref("ml/stack:v1")
    r = wh("push", house, ref, "--json")
    assert r.returncode == 0, r.stderr
    pushed = json.loads(r.stdout)
    sent = files_of(house)
    assert pushed["uploaded"] == len(sent) and pushed["skipped"] == 0
    assert {b["path"] for b in pushed["blobs"]} == set(sent)
    assert oci_registry.blob_uploads() == len(sent) + 1  # and the 2-byte empty config, once

    manifest = raw_manifest(oci_registry, "ml/stack", "v1")
    assert manifest["artifactType"] == ARTIFACT_TYPE
    assert manifest["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    titles = {layer["annotations"]["org.opencontainers.image.title"]: layer for layer in manifest["layers"]}
    assert set(titles) == set(sent)
    wheel = next(p for p in sent if p.startswith("wheels/core-"))
    assert titles[wheel]["digest"] == "sha256:" + hashlib.sha256(sent[wheel]).hexdigest()
    notes = manifest["annotations"]
    assert notes["vnd.wh.target.python"] == ".".join(map(str, sys.version_info[:3]))
    assert notes["vnd.wh.wheels"] == "2" and "vnd.wh.target" in notes
    assert "sha256:" + hashlib.sha256(
        urllib.request.urlopen(urllib.request.Request(
            f"http://{oci_registry.host}/v2/ml/stack/manifests/v1",
            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})).read()).hexdigest() == pushed["digest"]

    out = tmp_path / "pulled"
    r = wh("pull", ref, "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    pulled = json.loads(r.stdout)
    assert pulled["digest"] == pushed["digest"] and pulled["fetched"] == len(sent) and pulled["reused"] == 0
    assert files_of(out) == sent
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir() if p.name.startswith(".pulled"))

    # By digest: the manifest's bytes are checked against it; the same tree comes back.
    r = wh("pull", f"{ref.rsplit(':', 1)[0]}@{pushed['digest']}", "-o", tmp_path / "by-digest")
    assert r.returncode == 0, r.stderr
    assert files_of(tmp_path / "by-digest") == sent


def test_second_wheelhouse_sharing_wheels_uploads_only_new_blobs(oci_registry, pub, tmp_path):
    first = stage(tmp_path, pub, "first", "web")
    second = stage(tmp_path, pub, "second", "api")
    r = wh("push", first, oci_registry.ref("ml/stack:web"), "--json")
    assert r.returncode == 0, r.stderr
    before = oci_registry.blob_uploads()

    r = wh("push", second, oci_registry.ref("ml/stack:api"), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    have = {hashlib.sha256(b).hexdigest() for b in files_of(first).values()}
    new = {p for p, b in files_of(second).items() if hashlib.sha256(b).hexdigest() not in have}
    uploaded = {b["path"] for b in report["blobs"] if b["uploaded"]}
    assert uploaded == new
    core = next(b for b in report["blobs"] if b["path"].startswith("wheels/core-"))
    assert core["uploaded"] is False  # the 300 KB shared wheel is stored once
    assert all(not b["uploaded"] for b in report["blobs"] if b["path"].startswith("bootstrap/") and
               not b["path"].endswith(".txt") and b["path"] != "bootstrap/pylock.toml")
    assert oci_registry.blob_uploads() - before == len(new) == report["uploaded"]
    print(f"second wheelhouse: {report['uploaded']} uploaded, {report['skipped']} skipped; "
          f"registry counted {oci_registry.blob_uploads() - before} uploads")

    # The same wheelhouse again: nothing is uploaded, the tag points at the same digest.
    again = oci_registry.blob_uploads()
    r2 = wh("push", second, oci_registry.ref("ml/stack:api"), "--json")
    assert json.loads(r2.stdout)["uploaded"] == 0 and json.loads(r2.stdout)["digest"] == report["digest"]
    assert oci_registry.blob_uploads() == again


def test_a_blob_corrupted_in_the_registry_is_refused_by_name(oci_registry, pub, tmp_path):
    house = stage(tmp_path, pub, "house", "web")
    ref = oci_registry.ref("ml/stack:v1")
    r = wh("push", house, ref, "--json")
    assert r.returncode == 0, r.stderr
    wheel = next(b for b in json.loads(r.stdout)["blobs"] if b["path"].startswith("wheels/core-"))
    stored = oci_registry.blob_file(wheel["digest"])
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped: only a digest check sees it
    stored.write_bytes(bytes(data))

    out = tmp_path / "pulled"
    r = wh("pull", ref, "-o", out)
    assert r.returncode == 1, r.stdout + r.stderr
    assert wheel["path"] in r.stderr and wheel["digest"] in r.stderr and "refused" in r.stderr
    assert not out.exists()  # nothing under the final name
    partial = tmp_path / ".pulled.wh-pull"
    assert not (partial / wheel["path"]).exists()
    assert not [p for p in partial.rglob("*.part")]

    # Install straight from the registry refuses it too, and installs nothing.
    venv = tmp_path / "venv"
    r = wh("install", ref, "--venv", venv)
    assert r.returncode == 1 and wheel["path"] in r.stderr
    assert not (venv / "bin" / "python").exists() or not list(venv.rglob("core/__init__.py"))


def test_a_manifest_disagreeing_with_its_lock_is_refused_before_any_wheel_is_fetched(oci_registry, pub, tmp_path):
    """A tag re-pointed at a manifest whose wheel layer is some other blob (present in the registry,
    so every digest check alone would pass): the lock's sha256 refuses it before a wheel is fetched."""
    house = stage(tmp_path, pub, "house", "web")
    assert wh("push", house, oci_registry.ref("ml/stack:v1")).returncode == 0
    manifest = raw_manifest(oci_registry, "ml/stack", "v1")
    layers = {la["annotations"]["org.opencontainers.image.title"]: la for la in manifest["layers"]}
    wheel = next(p for p in layers if p.startswith("wheels/web-"))
    decoy = layers["capture_target.py"]
    layers[wheel]["digest"], layers[wheel]["size"] = decoy["digest"], decoy["size"]
    req = urllib.request.Request(f"http://{oci_registry.host}/v2/ml/stack/manifests/evil", method="PUT",
                                 data=json.dumps(manifest).encode(),
                                 headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    urllib.request.urlopen(req, timeout=10).close()
    before = oci_registry.blob_fetches()
    r = wh("pull", oci_registry.ref("ml/stack:evil"), "-o", tmp_path / "pulled")
    assert r.returncode == 1 and wheel in r.stderr and "pylock.toml" in r.stderr
    assert oci_registry.blob_fetches() - before == 3  # wh.json and the two locks only: no wheel
    assert not (tmp_path / "pulled").exists()


def test_an_interrupted_pull_resumes_fetching_only_the_rest(oci_registry, pub, tmp_path):
    house = stage(tmp_path, pub, "house", "web")
    ref = oci_registry.ref("ml/stack:v1")
    assert wh("push", house, ref).returncode == 0
    total = len(files_of(house))
    out = tmp_path / "pulled"
    start = oci_registry.blob_fetches()

    # One blob at a time, so the count is exact: SIGKILL as the 4th blob gets its name.
    killed = run_with_fault(["pull", ref, "-o", out, "-j", "1"], "oci.pull.named.4")
    assert killed.returncode == -9, killed.stderr
    assert not out.exists()
    first_run = oci_registry.blob_fetches() - start
    assert first_run == 4

    r = wh("pull", ref, "-o", out, "--json")  # 4 at once
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    second_run = oci_registry.blob_fetches() - start - first_run
    assert report["reused"] == 4 and report["fetched"] == total - 4 == second_run
    assert files_of(out) == files_of(house)
    assert not (tmp_path / ".pulled.wh-pull").exists()
    print(f"resume: {total} blobs; the killed run fetched {first_run}, the re-run {second_run}")

    # Pulling the same artifact over the finished wheelhouse fetches nothing (every file re-hashed).
    before = oci_registry.blob_fetches()
    r = wh("pull", ref, "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["fetched"] == 0 and oci_registry.blob_fetches() == before
    assert files_of(out) == files_of(house)


def test_an_interrupted_push_publishes_nothing_and_resumes(oci_registry, pub, tmp_path):
    house = stage(tmp_path, pub, "house", "web")
    ref = oci_registry.ref("ml/stack:v1")
    killed = run_with_fault(["push", house, ref], "oci.push.uploaded")  # right after the first blob went up
    assert killed.returncode == -9, killed.stderr
    r = wh("pull", ref, "-o", tmp_path / "early")
    assert r.returncode == 1 and "manifest not found" in r.stderr  # nothing under the tag yet
    r = wh("push", house, ref, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    # What went up before the kill (the first blob, and any other in flight) is not sent again.
    assert report["skipped"] >= 1 and report["uploaded"] == len(files_of(house)) - report["skipped"]


def test_pulling_a_new_tag_over_an_earlier_wheelhouse_fetches_only_what_changed(oci_registry, pub, tmp_path):
    first = stage(tmp_path, pub, "first", "web")
    second = stage(tmp_path, pub, "second", "web", "api")
    assert wh("push", first, oci_registry.ref("ml/stack:one")).returncode == 0
    assert wh("push", second, oci_registry.ref("ml/stack:two")).returncode == 0
    out = tmp_path / "box"
    assert wh("pull", oci_registry.ref("ml/stack:one"), "-o", out).returncode == 0
    (out / "notes.txt").write_text("mine\n")  # the user's own file in the folder survives the update
    before = oci_registry.blob_fetches()
    r = wh("pull", oci_registry.ref("ml/stack:two"), "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    have = {hashlib.sha256(b).hexdigest() for b in files_of(first).values()}
    changed = {p for p, b in files_of(second).items() if hashlib.sha256(b).hexdigest() not in have}
    assert {b["path"] for b in report["blobs"] if b["fetched"]} == changed
    assert oci_registry.blob_fetches() - before == len(changed)
    assert files_of(out) == {**files_of(second), "notes.txt": b"mine\n"}


def test_pull_refuses_a_folder_that_is_not_a_wheelhouse(oci_registry, tmp_path):
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_bytes(b"meow")
    r = wh("pull", oci_registry.ref("ml/stack:v1"), "-o", out)
    assert r.returncode == 2 and "not a wheelhouse" in r.stderr
    assert files_of(out) == {"cat.jpg": b"meow"}


def test_install_from_the_registry_end_to_end(oci_registry, pub, tmp_path):
    house = stage(tmp_path, pub, "house", "web")
    ref = oci_registry.ref("ml/stack:v1")
    assert wh("push", house, ref).returncode == 0
    venv = tmp_path / "venv"
    r = wh("install", ref, "--venv", venv, "--json")
    assert r.returncode == 0, r.stderr
    assert {(d["name"], d["version"]) for d in json.loads(r.stdout)["installed"]} == {("web", "1.0"), ("core", "2.0")}
    got = subprocess.run([venv / "bin" / "python", "-c", "import web; print(web.V)"], capture_output=True, text=True)
    assert got.stdout.strip() == "2"


def test_big_blobs_go_up_in_chunks_and_requests_are_counted(oci_registry, pub, tmp_path, monkeypatch):
    """Blobs over the one-PUT size are uploaded in chunks (never whole in memory); the client's own
    request counts match what the registry logged."""
    from wheelhouse.carry import oci_client
    from wheelhouse.carry.oci import pull_wheelhouse, push_wheelhouse

    monkeypatch.setattr(oci_client, "_SMALL_BLOB", 64 << 10)
    monkeypatch.setattr(oci_client, "_CHUNK", 100 << 10)
    house = stage(tmp_path, pub, "house", "web")
    ref = oci_registry.ref("ml/stack:chunks")
    pushed = push_wheelhouse(house, ref)
    distinct = {b.digest for b in pushed.blobs}
    core = next(b for b in pushed.blobs if b.path.startswith("wheels/core-"))
    assert core.size > 2 * (100 << 10) and core.moved
    logged = oci_registry.requests()
    patches = [p for m, p, s in logged if m == "PATCH"]
    assert len(patches) == -(-core.size // (100 << 10))  # the one big blob, in 100 KiB chunks
    assert pushed.requests["HEAD"] == len(distinct) + 1  # one existence check per blob, and the config
    assert pushed.requests["PATCH"] == len(patches)
    assert pushed.requests["PUT"] == sum(1 for m, p, s in logged if m == "PUT")

    pulled = pull_wheelhouse(ref, tmp_path / "pulled")
    assert files_of(tmp_path / "pulled") == files_of(house)
    assert pulled.requests["GET"] == len(pulled.blobs) + 1  # the manifest, then one per blob
    assert len(pulled.fetched) == len(pulled.blobs)


# --- credentials -----------------------------------------------------------------------------------

def test_docker_config_credentials_reach_the_registry_and_never_show(pub, tmp_path):
    secret = "s3cret-Pa55-never-printed"
    reg = start_registry(tmp_path / "auth-registry", user="alice", password=secret)
    try:
        house = stage(tmp_path, pub, "house", "web")
        ref = reg.ref("ml/stack:v1")

        nothing = tmp_path / "no-docker"
        r = wh("push", house, ref, env={"DOCKER_CONFIG": str(nothing)})
        assert r.returncode == 1 and "asks for credentials" in r.stderr and f"docker login {reg.host}" in r.stderr

        wrong = tmp_path / "wrong-docker"
        wrong.mkdir()
        (wrong / "config.json").write_text(json.dumps(
            {"auths": {reg.host: {"auth": base64.b64encode(b"alice:not-it").decode()}}}))
        r = wh("push", house, ref, env={"DOCKER_CONFIG": str(wrong)})
        assert r.returncode == 1 and "refused the credentials for alice" in r.stderr and "not-it" not in r.stderr

        docker = tmp_path / "docker"
        docker.mkdir()
        (docker / "config.json").write_text(json.dumps(
            {"auths": {f"http://{reg.host}": {"auth": base64.b64encode(f"alice:{secret}".encode()).decode()}}}))
        env = {"DOCKER_CONFIG": str(docker)}
        r = wh("-v", "push", house, ref, "--json", env=env)
        assert r.returncode == 0, r.stderr
        outputs = [r.stdout, r.stderr]
        out = tmp_path / "pulled"
        r = wh("-v", "pull", ref, "-o", out, "--json", env=env)
        assert r.returncode == 0, r.stderr
        outputs += [r.stdout, r.stderr]
        assert files_of(out) == files_of(house)
        encoded = base64.b64encode(f"alice:{secret}".encode()).decode()
        for text in outputs:
            assert secret not in text and encoded not in text
        for blob in files_of(out).values():
            assert secret.encode() not in blob and encoded.encode() not in blob
        # A credential helper (docker-credential-NAME get, host on stdin) is asked the same way docker asks it.
        helper_bin = tmp_path / "helper-bin"
        helper_bin.mkdir()
        helper = helper_bin / "docker-credential-whtest"
        helper.write_text("#!/bin/sh\nread host\n"
                          f"[ \"$host\" = \"{reg.host}\" ] || exit 1\n"
                          f"printf '{{\"Username\":\"alice\",\"Secret\":\"{secret}\"}}'\n")
        helper.chmod(0o755)
        helped = tmp_path / "helped-docker"
        helped.mkdir()
        (helped / "config.json").write_text(json.dumps({"credHelpers": {reg.host: "whtest"}}))
        r = wh("pull", ref, "-o", tmp_path / "helped", "--json",
               env={"DOCKER_CONFIG": str(helped), "PATH": f"{helper_bin}:{os.environ['PATH']}"})
        assert r.returncode == 0, r.stderr
        assert secret not in r.stdout + r.stderr and files_of(tmp_path / "helped") == files_of(house)
        # The registry saw authorized requests (and only those, past the first ping).
        statuses = [s for m, p, s in reg.requests() if p != "/v2/"]
        assert statuses and all(s != 401 for s in statuses[-10:])
    finally:
        reg.stop()


def test_a_tls_registry_is_trusted_through_wh_ca_bundle_and_refused_without_it(pub, tmp_path):
    reg = start_registry(tmp_path / "tls-registry", tls=True)
    try:
        house = stage(tmp_path, pub, "house", "web")
        ref = reg.ref("ml/stack:v1")
        r = wh("push", house, ref, env={"WH_CA_BUNDLE": "", "REQUESTS_CA_BUNDLE": "", "SSL_CERT_FILE": ""})
        assert r.returncode == 1 and f"TLS with registry {reg.host} failed" in r.stderr and "WH_CA_BUNDLE" in r.stderr
        env = {"WH_CA_BUNDLE": str(reg.ca)}
        r = wh("push", house, ref, env=env)
        assert r.returncode == 0, r.stderr
        r = wh("pull", ref, "-o", tmp_path / "pulled", env=env)
        assert r.returncode == 0, r.stderr
        assert files_of(tmp_path / "pulled") == files_of(house)
    finally:
        reg.stop()


# --- refusals --------------------------------------------------------------------------------------

def test_without_the_oci_extra_push_and_pull_name_it(tmp_path):
    hide = "import sys; sys.modules['oras'] = None; from wheelhouse.cli import main; main(sys.argv[1:])"
    for args in (["push", str(tmp_path), "oci://127.0.0.1:1/a/b:c"], ["pull", "oci://127.0.0.1:1/a/b:c", "-o",
                                                                        str(tmp_path / "o")]):
        (tmp_path / "wh.json").write_text(json.dumps({"schema": "wh-wheelhouse/1"}))
        r = subprocess.run([sys.executable, "-c", hide, *args], capture_output=True, text=True)
        assert r.returncode == 2, r.stderr
        assert "pip install 'wh[oci]'" in r.stderr


def test_an_unreachable_registry_fails_fast_and_names_it(pub, tmp_path):
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    r = wh("pull", f"oci://127.0.0.1:{port}/ml/stack:v1", "-o", tmp_path / "o")
    assert r.returncode == 1 and f"cannot reach registry 127.0.0.1:{port}" in r.stderr
    assert time.monotonic() - start < 20
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("text", ["oci://host", "http://host/a:b", "oci://user:pw@host/a:b", "oci://host/UPPER:x",
                                  "oci://host/a@sha256:abc", "oci://host/a:bad tag"])
def test_bad_references_are_refused(text):
    with pytest.raises(BadReference):
        parse_ref(text)


def test_references_parse():
    r = parse_ref("oci://127.0.0.1:5000/team.ml/stack:v1")
    assert (r.host, r.repository, r.tag, r.is_loopback) == ("127.0.0.1:5000", "team.ml/stack", "v1", True)
    r = parse_ref("oci://registry.internal/stack@sha256:" + "a" * 64)
    assert r.tag is None and r.reference == "sha256:" + "a" * 64 and not r.is_loopback
    assert parse_ref("oci://localhost:5000/stack").tag == "latest"


@pytest.mark.parametrize("title", ["../evil", "/etc/passwd", "wheels/../../x", ".hidden", "a\\b", ""])
def test_a_manifest_with_an_unsafe_path_is_refused(title):
    layer = {"mediaType": "x", "digest": "sha256:" + "0" * 64, "size": 1,
             "annotations": {"org.opencontainers.image.title": title}}
    ok = [{"mediaType": "x", "digest": "sha256:" + "1" * 64, "size": 1,
           "annotations": {"org.opencontainers.image.title": n}} for n in ("wh.json", "pylock.toml")]
    body = json.dumps({"schemaVersion": 2, "artifactType": ARTIFACT_TYPE, "layers": [*ok, layer]}).encode()
    with pytest.raises(NotAWheelhouseArtifact):
        parse_manifest(body, "test")


def test_another_kind_of_artifact_is_refused():
    body = json.dumps({"schemaVersion": 2, "artifactType": "application/vnd.other", "layers": []}).encode()
    with pytest.raises(NotAWheelhouseArtifact, match="not a wh wheelhouse"):
        parse_manifest(body, "test")
