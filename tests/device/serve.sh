#!/usr/bin/env bash
# wh serve / stop / smoke on the offline H200 box, with tests/support/fake_engine.py as the engine (there is no
# model on the box) run by the image's interpreter, and a "rank" that holds REAL GPU memory via torch.
#
#   bash tests/device/serve.sh
#
# Proves:
#   1. GPU preflight on real nvidia-smi facts: the right count passes, count+1 is refused;
#   2. launch in its own process group, health readiness, smoke (TTFT, tok/s, both channels);
#   3. while the rank holds 6 GiB on the card, a second launch is refused as "busy card" (> 4096 MiB);
#   4. stop: leader and rank gone, port free, and the rank's GPU memory released (nvidia-smi);
#   5. with click available: the same through the CLI (`wh serve --detach --smoke --json`, `wh stop`),
#      plus one launch with the full preflight (the doctor against the image's interpreter).
# Evidence (JSON, logs) goes to $OUT; a compact summary is printed at the end. About a minute.
set -u
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-serve-device-out}
mkdir -p "$OUT"
REPO=$PWD
WORK=$(mktemp -d /tmp/wh-serve-dev.XXXX)
export PYTHONPATH="$REPO${WH_BOX_DEPS:+:$WH_BOX_DEPS}${PYTHONPATH:+:$PYTHONPATH}"
export WH_STATE_DIR="$WORK/state"
export RANK_MIB=${RANK_MIB:-6144}   # GPU memory the fake rank holds (0: none, for a dry run without a GPU)
declare -a SUMMARY=()
FAIL=0
say() { SUMMARY+=("$*"); echo "== $*" >&2; }
bad() { FAIL=1; say "FAIL $*"; }

# --- 1-4 through the library (needs no click/rich) ---------------------------------------------------
cat >"$WORK/drive.py" <<'EOF'
import json, os, socket, subprocess, sys, time
from pathlib import Path
from wheelhouse import serve as srv
from wheelhouse.serve import preflight as pre
from wheelhouse.target.gpu import query_gpus
from wheelhouse.serve.readiness import make_probe
from wheelhouse.serve.smoke import run_smoke

out = Path(os.environ["OUT"]); py = sys.executable; res = {}
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]
def gone(pid):
    try: st = Path(f"/proc/{pid}/stat").read_text()
    except OSError: return True
    return st[st.rfind(")") + 2] in "ZX"
def apps():
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
    except FileNotFoundError:
        return {}
    return {int(a): int(b) for a, b in (l.split(",") for l in r.stdout.splitlines() if l.strip())}

gpus = query_gpus(); n = len(gpus)
res["gpus"] = [{"index": g.index, "name": g.name, "used_mib": g.memory_used_mib, "total_mib": g.memory_total_mib} for g in gpus]
res["count_right"] = pre.check_gpus(gpus, expected=n, max_used_mib=None)
res["count_wrong"] = pre.check_gpus(gpus, expected=n + 1, max_used_mib=None)

port = free_port(); url = f"http://127.0.0.1:{port}"; log = out / "lib-serve.log"
mib = os.environ["RANK_MIB"]
spec = srv.LaunchSpec(command=(py, "tests/support/fake_engine.py", "--port", str(port), "--rank-gpu-mib", mib), url=url, log=log)
engine, proc, secs = srv.launch(spec, make_probe("health", url), timeout=120, interval=0.2, grace=5)
res["ready_s"] = round(secs, 2)
try:
    rank = int(next(l.split()[-1] for l in log.read_text().splitlines() if l.startswith("rank pid")))
    deadline = time.time() + (90 if mib != "0" else 0)
    # The rank shows in nvidia-smi as soon as its CUDA context exists (~14 MiB), before its allocation:
    # wait for the allocation itself, or the busy-card check reads a card that is not busy yet.
    while apps().get(rank, 0) < int(mib) * 0.9 and time.time() < deadline:
        time.sleep(0.5)
    res["rank_gpu_mib"] = apps().get(rank)
    res["busy_refused"] = pre.check_gpus(query_gpus(), expected=n, max_used_mib=4096)
    res["smoke"] = run_smoke(url, max_tokens=64, timeout=60).to_json()
    srv.write_state(engine)
finally:
    eng, rep = srv.stop_detached(grace=5)
    proc.wait()
res["stop"] = rep.to_json()
res["leader_gone"], res["rank_gone"] = gone(engine.pid), gone(rank)
time.sleep(1)
res["port_free"] = not srv.port_open(url)
res["rank_gpu_after_stop"] = apps().get(rank)
print(json.dumps(res, indent=2))
EOF
OUT="$OUT" timeout 170 "$PY" "$WORK/drive.py" >"$OUT/serve-lib.json" 2>"$OUT/serve-lib.stderr"
rc=$?
if [ $rc -ne 0 ]; then
  bad "library scenario exit $rc: $(tail -5 "$OUT/serve-lib.stderr" | tr '\n' ' ')"
else
  eval "$("$PY" - "$OUT/serve-lib.json" <<'EOF'
import json, sys, shlex
r = json.load(open(sys.argv[1])); s = r.get("smoke") or {}
def e(k, v): print(f"{k}={shlex.quote(str(v))}")
e("NG", len(r["gpus"])); e("RIGHT", len(r["count_right"])); e("WRONG", "; ".join(r["count_wrong"]))
e("RANKMIB", r.get("rank_gpu_mib")); e("BUSY", "; ".join(r["busy_refused"]))
e("SMOKE", f"model {s.get('model')} tokens {s.get('tokens')} ({s.get('reasoning_tokens')} reasoning) TTFT {s.get('ttft_s')} s decode {s.get('decode_tok_s')} tok/s")
e("GONE", f"{r['leader_gone']} {r['rank_gone']} {r['port_free']}"); e("AFTER", r.get("rank_gpu_after_stop")); e("READY", r["ready_s"])
e("SIGS", f"sigterm={r['stop']['sigterm']} sigkill={r['stop']['sigkill']}")
EOF
)"
  say "gpus: $NG; preflight count=$NG -> $RIGHT problems; count=$((NG+1)) -> '$WRONG'"
  [ "$RIGHT" = 0 ] && [ -n "$WRONG" ] || bad "GPU count preflight"
  say "ready in $READY s; rank holds ${RANKMIB:-?} MiB on the GPU"
  [ -n "$BUSY" ] && say "busy card refused: $BUSY" || bad "busy card NOT refused (rank holds ${RANKMIB:-?} MiB)"
  say "smoke: $SMOKE"
  say "stop ($SIGS): leader gone, rank gone, port free = $GONE; rank's GPU memory after stop: ${AFTER:-released}"
  [ "$GONE" = "True True True" ] && [ "$AFTER" = "None" ] || bad "stop left something behind"
fi

# --- 5: the CLI, where click is installed -------------------------------------------------------------
if "$PY" -c "import click, rich" 2>/dev/null; then
  wh() { COLUMNS=200 NO_COLOR=1 timeout 150 "$PY" -m wheelhouse "$@"; }
  P=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
  FAKE=("$PY" tests/support/fake_engine.py --port "$P")
  wh serve --gpus 99 --log "$OUT/cli-refused.log" -- "${FAKE[@]}" 2>"$OUT/cli-refused.stderr"; rc=$?
  [ $rc = 1 ] && grep -q "expected exactly 99 GPU" "$OUT/cli-refused.stderr" && [ ! -e "$OUT/cli-refused.log" ] \
    && say "cli: --gpus 99 refused before launch" || bad "cli --gpus 99: rc $rc $(tail -3 "$OUT/cli-refused.stderr")"
  wh serve --no-preflight --detach --smoke --json --interval 0.2 --log "$OUT/cli-serve.log" -- "${FAKE[@]}" \
    >"$OUT/cli-serve.json" 2>"$OUT/cli-serve.stderr"; rc=$?
  [ $rc = 0 ] && say "cli: $(grep -E '^(ready in|model )' "$OUT/cli-serve.stderr" | tr '\n' ' ')" || bad "cli serve rc $rc: $(tail -5 "$OUT/cli-serve.stderr")"
  wh stop --json >"$OUT/cli-stop.json" 2>"$OUT/cli-stop.stderr" && say "cli: $(cat "$OUT/cli-stop.stderr")" || bad "cli stop: $(cat "$OUT/cli-stop.stderr")"
  # Full preflight: the doctor runs against the image's interpreter (argv[0] of the command).
  T0=$(date +%s)
  wh serve --gpus "${NG:-1}" --detach --interval 0.2 --log "$OUT/cli-preflight.log" -- "${FAKE[@]}" 2>"$OUT/cli-preflight.stderr"; rc=$?
  say "cli: full preflight (doctor on $PY) -> exit $rc in $(( $(date +%s) - T0 )) s: $(grep -E '^(error|  - |ready in)' "$OUT/cli-preflight.stderr" | head -4 | tr '\n' ' ')"
  [ $rc = 0 ] && wh stop >/dev/null 2>&1
else
  say "cli: click/rich not importable by $PY; CLI steps skipped (library scenario above is the proof)"
fi

echo
echo "==== wh serve on the device: summary ===="
printf '%s\n' "${SUMMARY[@]}"
[ $FAIL = 0 ] && echo "RESULT: OK" || echo "RESULT: FAILED"
exit $FAIL
