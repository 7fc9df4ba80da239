"""`wh push` / `wh pull`: a wheelhouse through an OCI registry (the `oci` extra: oras-py)."""

from __future__ import annotations

from pathlib import Path

import click

from ._ui import emit_json, plural

__all__ = ["push", "pull"]

_INSECURE_HELP = ("Allow plain http, where https is not spoken, for a registry that is not on loopback "
                  "(localhost and 127.0.0.1 fall back to it already); credentials then cross the network "
                  "unencrypted. TLS is always verified: a private CA goes in WH_CA_BUNDLE.")


@click.command()
@click.argument("wheelhouse", type=click.Path(file_okay=False, path_type=Path))
@click.argument("ref")
@click.option("--insecure", is_flag=True, help=_INSECURE_HELP)
@click.option("-j", "--jobs", type=click.IntRange(1, 32), default=4, show_default=True, help="Blobs uploaded at once.")
@click.option("--json", "as_json", is_flag=True, help="Print the blobs uploaded and skipped, and the digest, as JSON.")
@click.pass_obj
def push(ui, wheelhouse: Path, ref: str, insecure: bool, jobs: int, as_json: bool) -> None:
    """Publish WHEELHOUSE to REF (oci://HOST[:PORT]/REPO:TAG) as one OCI artifact.

    Every file is checked against the locks first, then becomes a content-addressed blob: a wheel
    the registry already holds (from any wheelhouse in the same repository) is not uploaded again.
    The target summary goes into the manifest's annotations. Credentials come from the docker
    config ($DOCKER_CONFIG/config.json or ~/.docker/config.json, `docker login`), never from REF.

    \b
    Examples:
      wh push ./wheelhouse oci://registry.internal:5000/ml/vllm-stack:2026-11
      wh push ./wheelhouse oci://localhost:5000/ml/stack:v1 --json
    """
    from wheelhouse.carry.oci import push_wheelhouse

    reporter = ui.reporter()
    try:
        result = push_wheelhouse(wheelhouse, ref, insecure=insecure, reporter=reporter, jobs=jobs)
    finally:
        reporter.close()
    if as_json:
        emit_json(result.to_json())
        return
    up = result.uploaded
    ui.info(f"pushed {wheelhouse} to {result.ref}: {plural(len(up), 'blob')} uploaded "
            f"({sum(b.size for b in up) / 1e6:.1f} MB), {len(result.skipped)} already in the registry")
    ui.data(str(result.ref.with_digest(result.digest)))


@click.command()
@click.argument("ref")
@click.option("-o", "--out", required=True, type=click.Path(path_type=Path),
              help="The wheelhouse folder to write (new, empty, or an earlier wheelhouse: replaced whole).")
@click.option("--insecure", is_flag=True, help=_INSECURE_HELP)
@click.option("-j", "--jobs", type=click.IntRange(1, 32), default=4, show_default=True, help="Blobs fetched at once.")
@click.option("--json", "as_json", is_flag=True, help="Print the blobs fetched and reused, and the digest, as JSON.")
@click.pass_obj
def pull(ui, ref: str, out: Path, insecure: bool, jobs: int, as_json: bool) -> None:
    """Fetch the wheelhouse REF (oci://HOST[:PORT]/REPO:TAG or ...@sha256:DIGEST) into OUT.

    Every blob is verified by its digest, and every wheel by the lock's sha256, before it gets its
    name; OUT appears only once the whole wheelhouse is there. An interrupted pull resumes: run it
    again and only what is not yet verified is fetched. Files an earlier wheelhouse at OUT already
    has are copied, not fetched.

    \b
    Examples:
      wh pull oci://registry.internal:5000/ml/vllm-stack:2026-11 -o /data/wheelhouse
      wh pull oci://registry.internal:5000/ml/vllm-stack@sha256:<digest> -o wh --json
      wh install oci://registry.internal:5000/ml/vllm-stack:2026-11 --venv /opt/venv   (pulls, then installs)
    """
    from wheelhouse.carry.oci import pull_wheelhouse

    reporter = ui.reporter()
    try:
        result = pull_wheelhouse(ref, out, insecure=insecure, reporter=reporter, jobs=jobs)
    finally:
        reporter.close()
    if as_json:
        emit_json(result.to_json())
        return
    got = result.fetched
    ui.info(f"pulled {result.ref} ({result.digest}): {plural(len(got), 'blob')} fetched "
            f"({sum(b.size for b in got) / 1e6:.1f} MB), {len(result.reused)} already here; all verified")
    target = result.annotations.get("vnd.wh.target")
    if target:
        ui.info(f"target: {target}")
    ui.data(str(result.path))
    ui.info(f"then: wh install {result.path} --venv /path/to/venv")
