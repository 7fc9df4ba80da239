"""`wh serve`, `wh stop`, `wh smoke`: launch the engine, gate on its real readiness, measure from the client."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import click

from wheelhouse import serve as srv
from wheelhouse.serve import preflight as pre
from wheelhouse.serve import state as state
from wheelhouse.errors import UsageError, WhError
from wheelhouse.procgroup import stop_group
from wheelhouse.serve.readiness import READY_MODES, auth_headers, make_probe
from wheelhouse.serve.lint import fill_placeholders, lint_command, port_from_command, url_values
from wheelhouse.serve.log import LogFollower
from wheelhouse.serve.smoke import DEFAULT_PROMPT, run_smoke
from ._options import FiniteFloatRange
from ._ui import check_writable, emit_json, sigterm_as_interrupt

__all__ = ["serve", "stop", "smoke"]

DEFAULT_URL = "http://127.0.0.1:1919"  # FreeToken's `ft serve` default port


class Interrupted(WhError):
    code = "interrupted"
    exit_code = 130


class _SplitAtDashes(click.Command):
    """Keeps everything after the first ``--`` as the engine command, untouched by click."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            ctx.meta["wh.command"] = tuple(args[i + 1:])
            args = args[:i]
        else:
            ctx.meta["wh.command"] = ()
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return super().collect_usage_pieces(ctx) + ["[-- COMMAND ...]"]




def _with_port(url: str, port: int) -> str:
    p = urlsplit(url)
    return urlunsplit((p.scheme, f"{p.hostname}:{port}", p.path, p.query, p.fragment))


def _preflight(ui, manifest, python, gpus_flag, max_used_flag, env, model) -> None:
    from wheelhouse.doctor import run_doctor
    from wheelhouse.patch import apply_patch
    from wheelhouse.target.gpu import query_gpus

    reporter = ui.reporter()
    # Every card: check_gpus limits them to the engine's CUDA_VISIBLE_DEVICES ([serve] env over wh's own).
    gpus = query_gpus(environ={k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"})

    def doctor_fn():
        return run_doctor(python=python, manifest=manifest, model=Path(model) if model else None, reporter=reporter).failed

    def apply(spec):
        return apply_patch(spec, python=python)
    expect = manifest.doctor if manifest else None
    try:
        pre.run_preflight(
            gpus=gpus,
            expected_gpus=gpus_flag if gpus_flag is not None else (expect.gpus if expect else None),
            max_used_mib=max_used_flag if max_used_flag is not None else (expect.max_used_mib if expect else None),
            visible=env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES")),
            patches=manifest.patches if manifest else (),
            apply_patch=apply,
            doctor=doctor_fn,
            reporter=reporter,
        )
    finally:
        reporter.close()


@click.command(cls=_SplitAtDashes, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("manifest", required=False)
@click.option("--ready", "ready_mode", type=click.Choice(READY_MODES),
              help="Readiness signal: health (GET /health JSON status ok), http (HTTP 200 from --path), "
                   "generate (a 1-token completion). Default: the manifest's, else health.")
@click.option("--url", envvar="WH_SERVE_URL", help="Where the engine listens. Default: manifest [serve] url, else "
                                                   "http://127.0.0.1:<--port in the command, else 1919>.")
@click.option("--path", "ready_path", help="Path for health/http readiness (default /health).")
@click.option("--timeout", type=FiniteFloatRange(0, min_open=True), help="Seconds to wait for readiness (default: manifest's, else 7200).")
@click.option("--log", "log_file", type=click.Path(dir_okay=False), help="Engine log file (default: $WH_STATE_DIR/logs/serve-<time>-<pid>.log, one per run).")
@click.option("--detach", is_flag=True, help="Leave it running once ready; `wh stop` stops it.")
@click.option("--smoke", "do_smoke", is_flag=True, help="Once ready, run `wh smoke` against it.")
@click.option("--model", help="Fills {model} in the manifest's command.")
@click.option("--no-preflight", is_flag=True, help="Skip doctor, GPU and patch preflight.")
@click.option("--allow-flag", "allow_flags", multiple=True, metavar="NAME",
              help="Override one flag rule by its name (--gpu-memory-utilization, "
                   "--speculative-config.num_speculative_tokens); recorded in the serve state. Repeatable.")
@click.option("--max-used-mib", type=click.IntRange(0), help="Refuse a GPU with more memory than this already in use "
                                               "(default: manifest [doctor] max-used-mib, else 4096).")
@click.option("--gpus", "gpus_flag", type=click.IntRange(0), help="Exact GPU count required (default: manifest [doctor] gpus).")
@click.option("--python", type=click.Path(dir_okay=False), help="Engine interpreter for the doctor and patches (default: argv[0] if a python, else its shebang).")
@click.option("--grace", type=FiniteFloatRange(0), default=15.0, show_default=True, help="Seconds between SIGTERM and SIGKILL when stopping.")
@click.option("--interval", type=FiniteFloatRange(0, min_open=True), default=1.0, show_default=True, help="Seconds between readiness checks.")
@click.option("--attempt-timeout", type=FiniteFloatRange(0, min_open=True), default=30.0, show_default=True, help="Seconds one readiness check (a generate completion) may take.")
@click.option("--json", "as_json", is_flag=True, help="Print url, pid, pgid, log, ready_s (and smoke) as JSON on stdout once ready.")
@click.option("-v", "--verbose", count=True, help="Tail the engine's log while it loads and serves (same as `wh -v serve`).")
@click.pass_context
def serve(ctx, manifest, ready_mode, url, ready_path, timeout, log_file, detach, do_smoke, model, no_preflight,
          allow_flags, max_used_mib, gpus_flag, python, grace, interval, attempt_timeout, as_json, verbose) -> None:
    """Launch the engine in its own process group and wait until it is really ready.

    \b
    wh serve MANIFEST [--model DIR] [-- EXTRA ARGS]   command from the manifest's [serve]
    wh serve [OPTIONS] -- COMMAND ...                   any engine command

    Ready means the engine said so (/health status ok) or generated a token, never that a
    port answered. If it exits, reports an error, times out or you press Ctrl-C before then,
    its whole group is stopped and the log's tail printed. Attached (the default), Ctrl-C
    stops it; --detach leaves it running and records it for `wh stop`.
    """
    from wheelhouse.manifest import load_manifest

    ui = ctx.obj
    if verbose and not ui.quiet:  # adds to the global -v; a global -q still wins, as in `wh -q -v`
        ui.verbose += verbose
    extra = ctx.meta.get("wh.command", ())
    man = load_manifest(manifest, read_files=False) if manifest else None
    spec = man.serve if man else None
    if man and spec is None and not extra:
        raise UsageError(f"manifest {manifest} has no [serve] command", hint="add a [serve] table, or give the command after --")
    argv = tuple(spec.command if spec else ()) + tuple(extra)
    if not argv:
        raise UsageError("no engine command given", hint="wh serve MANIFEST, or wh serve [OPTIONS] -- COMMAND ...")
    if python:  # the program from --python's environment, not whatever PATH finds first
        argv = pre.in_environment(argv, python)

    url_from = "--url"
    if not url:
        url_from = f"{manifest}: serve.url" if spec else "--url"
        url = spec.url if spec else DEFAULT_URL
        port = port_from_command(argv)
        if port:
            url = _with_port(url, port)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:  # before anything starts
        raise UsageError(f"{url_from} {url!r} is not an http(s) URL with a host", hint="write it like http://127.0.0.1:1919")
    log = Path(log_file) if log_file else state.default_log_path()
    if log_file:
        check_writable("--log", log)
    else:
        check_writable("log file", log, hint="set WH_STATE_DIR to a folder you can write to, or pass --log FILE")
    values = {"model": model, "api_key": os.environ.get("WH_API_KEY"), **url_values(url)}
    argv = fill_placeholders(argv, values)
    secret = values["api_key"]
    shown = tuple(a.replace(secret, "***") for a in argv) if secret else argv  # never print or record the key
    # Judged as shown: a refusal quotes values, and the key must never be one of them.
    overridden = lint_command(shown, spec.rules if spec else None, allow=allow_flags)
    for v in overridden:
        ui.info(f"allowed by --allow-flag {v.rule.name}: {v.why} (rule from {v.rule.source}: {v.rule.reason})")
    ready_mode = ready_mode or (spec.ready if spec else "health")
    timeout = timeout if timeout is not None else (spec.timeout if spec else 7200.0)
    env = dict(spec.env) if spec else {}

    if detach:
        running = state.read_state()
        if running and state.engine_alive(running):
            raise UsageError(f"wh already has a detached engine running (pid {running.pid}, {running.url})",
                             hint="stop it first with `wh stop`")
    python = python or pre.engine_python(argv)
    if not no_preflight:
        ui.info(f"preflight: doctor and patches for {python or 'this interpreter'}")
        _preflight(ui, man, python, gpus_flag, max_used_mib, env, model)

    # The environment the doctor judged: wh env's variables for the engine's interpreter, then [serve] env.
    launch_spec = srv.LaunchSpec(command=argv, url=url, log=log, env=srv.engine_env(python, env),
                                 redact=(secret,) if secret else ())
    probe = make_probe(ready_mode, url, path=ready_path or (spec.path if spec else None),
                       attempt_timeout=attempt_timeout, headers=auth_headers())
    follower = LogFollower(log)
    reporter = ui.reporter()

    def tick():
        lines = follower.new_lines()
        if ui.verbose > 0:
            for line in lines:
                reporter.note(f"| {line}")

    ui.info(f"starting: {' '.join(shown)}")
    ui.info(f"log: {log}   ready when: {ready_mode} at {url}")
    with sigterm_as_interrupt():
        try:
            engine, proc, seconds = srv.launch(launch_spec, probe, timeout=timeout, interval=interval, grace=grace,
                                               reporter=reporter, on_tick=tick)
        except KeyboardInterrupt:
            raise Interrupted("interrupted before the engine was ready; its process group was stopped",
                              hint=f"run wh serve again (the log is {log})") from None
        finally:
            reporter.close()
        detached = False
        try:
            ui.info(f"ready in {seconds:.0f} s: {url}  (pid {engine.pid}, process group {engine.pgid})")
            result = {"url": url, "pid": engine.pid, "pgid": engine.pgid, "log": str(log), "ready": ready_mode,
                      "ready_s": round(seconds, 3), "command": list(shown), "detached": detach,
                      "allowed_flags": list(dict.fromkeys(allow_flags))}
            if do_smoke:
                sm = run_smoke(url, timeout=max(attempt_timeout, 300.0))
                ui.info(sm.summary())
                result["smoke"] = sm.to_json()
            if detach:
                path = state.write_state(dataclasses.replace(engine, command=shown,
                                                             allowed_flags=tuple(dict.fromkeys(allow_flags))))
                detached = True
                ui.info(f"detached; state in {path}. Stop it with `wh stop`.")
            if as_json:
                emit_json(result)
            if detached:
                return
            ui.info("serving; press Ctrl-C to stop it")
            report = srv.serve_until_exit(engine, proc, grace=grace, on_tick=tick)
        except KeyboardInterrupt:
            if detached:
                raise Interrupted("interrupted; the detached engine keeps running", hint="stop it with `wh stop`") from None
            report = srv.shutdown(engine, proc, grace=grace)  # Ctrl-C once ready is the normal way to stop
        except BaseException:
            if not detached:  # nothing half-started: a failed smoke stops the group
                stop_group(engine.pgid, leader=proc, grace=grace)
                srv.stop_strays(engine, grace=grace)
            raise
        ui.info(f"stopped process group {report.pgid}" + (" (SIGKILL needed)" if report.sigkill else "") + "; port is free")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--grace", type=FiniteFloatRange(0), default=15.0, show_default=True, help="Seconds between SIGTERM and SIGKILL.")
@click.option("--json", "as_json", is_flag=True, help="Print what was stopped as JSON on stdout.")
@click.pass_context
def stop(ctx, grace, as_json) -> None:
    """Stop the engine `wh serve --detach` started: its whole process group, then check the port is free."""
    ui = ctx.obj
    engine, report = srv.stop_detached(grace=grace)
    if report.was_running:
        how = "SIGTERM then SIGKILL" if report.sigkill else "SIGTERM"
        ui.info(f"stopped process group {engine.pgid} ({how}, {report.seconds:.1f} s); {engine.url} is free")
    else:
        ui.info(f"the engine (pid {engine.pid}) had already exited; state removed")
    if as_json:
        emit_json({"engine": engine.to_json(), "stop": report.to_json()})


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="WH_SERVE_URL", help="Engine URL (default: the detached engine's, else http://127.0.0.1:1919).")
@click.option("--max-tokens", type=click.IntRange(1), default=256, show_default=True, help="Tokens to generate (a couple of hundred makes tok/s meaningful).")
@click.option("--prompt", default=DEFAULT_PROMPT, help="The user message.")
@click.option("--timeout", type=FiniteFloatRange(0, min_open=True), default=900.0, show_default=True, help="Seconds the whole request may take.")
@click.option("--api-key", envvar="WH_API_KEY", help="Bearer key for engines started with --api-key.")
@click.option("--json", "as_json", is_flag=True, help="Print model, tokens, ttft_s, decode_tok_s, ... as JSON on stdout.")
@click.pass_context
def smoke(ctx, url, max_tokens, prompt, timeout, api_key, as_json) -> None:
    """One streamed chat: model id from /v1/models, tokens from content AND reasoning_content, TTFT and tok/s timed here."""
    ui = ctx.obj
    if not url:
        running = state.read_state()
        url = running.url if running else DEFAULT_URL
    result = run_smoke(url, prompt=prompt, max_tokens=max_tokens, timeout=timeout, api_key=api_key)
    ui.info(result.summary())
    if ui.verbose > 0:
        ui.info(f"reasoning: {result.reasoning!r}\ncontent: {result.text!r}")
    if as_json:
        emit_json(result.to_json())
