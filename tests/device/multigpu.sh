#!/usr/bin/env bash
# Proof on several GPUs (issue 33): the doctor and the preflight on a box of N cards, and the real FreeToken
# serving tensor-parallel over all of them. For nvidia-h200-x4 (N=4) or -x2 (N=2); N is read from nvidia-smi.
#
#   bash tests/device/multigpu.sh WHEELHOUSE [MIRROR]          # everything, ~8 min (one device call)
#   PARTS="doctor build" bash tests/device/multigpu.sh ...      # or in two calls on one warm machine:
#   PARTS="preflight tp fleet" bash tests/device/multigpu.sh ...  # (WORK is kept; the build is reused)
#
# WHEELHOUSE and MIRROR as for evidence.sh: FreeToken's runtime requirements staged as a delta against the box's
# captured profile (`wh stage manifests/freetoken-h200.toml -o .device/ft-wh`), and a bare git mirror of FreeToken.
#
# doctor     `wh doctor` sees N GPUs, one driver and one sm on every card, the interconnect (`nvidia-smi topo -m`
#            kept in $OUT); a manifest's `[doctor] gpus = N` is ok and `gpus = N+1` a fail naming the count.
# build      wh bootstrapped offline, FreeToken built by `wh build` from the mirror and installed from the carried
#            wheelhouse (evidence.sh's steps, tests/device/lib.sh), a tiny qwen2 whose head counts divide N.
# preflight  a torch process holding 6 GiB on the last GPU: `wh serve --gpus N` refuses before launch, naming the
#            card and that process; with the process gone it launches (the tp part is that launch).
# tp         FreeToken with --tensor-parallel-size N, nvcc from PATH as `wh env` sets it (pynccl.cu is compiled at
#            TP > 1), ready on /health, `wh smoke` streams tokens; nvidia-smi per-rank memory (the same on every
#            rank); NVLink multicast off in the environment of the engine and of every rank (/proc/PID/environ);
#            `wh stop` leaves no rank process and no GPU memory in use.
# fleet      `wh doctor --json` on all cards and with CUDA_VISIBLE_DEVICES=0,1 (0 on two cards), compared with
#            `wh doctor compare`: the GPU count is the only difference.
# NVLink multicast stays off everywhere (the shared hosts' rule): the three variables are exported here for
# everything this script starts, and the box's manifest sets them in [serve] env for the engine (docs/serve.md).
# Evidence in $OUT; PASS/FAIL lines and a summary at the end; exit 1 when anything failed.
# (REHEARSAL=1, for the CPU rehearsal only: the preflight's doctor runs its gpu checks alone.)
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
N=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c '^[0-9]')
if [ "${N:-0}" -lt 2 ]; then
  echo "SKIP: needs >= 2 GPUs (nvidia-smi lists ${N:-0})"
  exit 0
fi
WH_DIR=$(realpath "${1:-.device/ft-wh}")
MIRROR=$(realpath "${2:-.device/freetoken.git}")
PARTS=${PARTS:-doctor build preflight tp fleet}
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-multigpu-out}
WORK=${WORK:-/tmp/wh-multigpu}
mkdir -p "$OUT" "$WORK"
export WH_STATE_DIR="$WORK/state"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
NVLS_VARS="NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
for kv in $NVLS_VARS; do
  k=${kv%%=*}; v=${kv#*=}
  [ "${!k:-unset}" = "$v" ] || echo "note: $k was '${!k:-unset}' here; exported as $v" >&2
  export "$k=$v"
done
source "$HERE/lib.sh"
has() { [[ " $PARTS " == *" $1 "* ]]; }
LAST=$((N - 1))
GPU_LIST=$(seq -s, 0 $LAST)
BV="$WORK/bv"; SV="$WORK/serve"; HOUSE="$WORK/house"; MODEL="$WORK/tiny-qwen2-tp$N"
SPY="$SV/bin/python"
smi_used() { nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits | tr -d ' '; }
say "$N GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | tr -s ' ' | tr '\n' ';')"

bootstrap_wh "$WH_DIR" "$WORK/whv"

# --- doctor ------------------------------------------------------------------------------------------
if has doctor; then
  nvidia-smi topo -m >"$OUT/topo.txt" 2>&1
  nvidia-smi --query-gpu=index,driver_version,compute_cap --format=csv,noheader >"$OUT/cards.csv" 2>&1
  DRIVERS=$(cut -d, -f2 "$OUT/cards.csv" | sort -u | tr -d ' ' | xargs)
  SMS=$(cut -d, -f3 "$OUT/cards.csv" | sort -u | tr -d ' ' | xargs)
  SM=${SMS%% *}
  say "nvidia-smi: driver(s) $DRIVERS; sm(s) $SMS; topo -m: $(grep -E '^GPU0' "$OUT/topo.txt" | tr -s '\t ' ' ' | cut -c1-120)"
  for want in $N $((N + 1)); do
    printf '[doctor]\ngpus = %s\nsm = "%s"\n' "$want" "$SM" >"$WORK/expect-$want.toml"
    $WH doctor --python "$PY" --manifest "$WORK/expect-$want.toml" --check gpu --json \
      >"$OUT/d-doctor-$want.json" 2>"$OUT/d-doctor-$want.stderr"
  done
  DEV=$(check_of "$OUT/d-doctor-$N.json" gpu:devices)
  say "gpu:devices: $(echo "$DEV" | cut -c1-200)"
  say "gpu:interconnect: $(check_of "$OUT/d-doctor-$N.json" gpu:interconnect)"
  [[ $DEV == "ok :: $N GPU(s)"* ]] && [[ $DEV == *"every card sm $SM"* ]] && [ "$(echo $DRIVERS | wc -w)" = 1 ] \
    && pass "D1 doctor sees $N GPUs, one driver ($DRIVERS) and sm $SM on every card" || bad "D1 doctor cards: $DEV; drivers $DRIVERS"
  check_of "$OUT/d-doctor-$N.json" gpu:interconnect | grep -qE "^info :: (NVLink|PCIe)" \
    && pass "D2 interconnect reported: $(check_of "$OUT/d-doctor-$N.json" gpu:interconnect | cut -d: -f3- | cut -c2-80)" \
    || bad "D2 interconnect: $(check_of "$OUT/d-doctor-$N.json" gpu:interconnect)"
  E1=$(check_of "$OUT/d-doctor-$N.json" gpu:expected); E2=$(check_of "$OUT/d-doctor-$((N + 1)).json" gpu:expected)
  [[ $E1 == ok* ]] && [[ $E2 == "fail :: $N GPU(s), manifest expects $((N + 1))"* ]] \
    && pass "D3 [doctor] gpus = $N ok; gpus = $((N + 1)) fails: ${E2#fail :: }" || bad "D3 gpus = $N: $E1 / gpus = $((N + 1)): $E2"
fi

# --- build: FreeToken from the mirror, installed from the carried wheelhouse, a model for TP=N -------------
if has build; then
  if [ -d "$MIRROR" ]; then
    build_freetoken B1 "$WH_DIR" "$MIRROR" "$BV" "$HOUSE"
    install_engine B2 "$HOUSE" "$SV"
  else
    bad "B1 no FreeToken mirror at $MIRROR"
  fi
  make_tiny_model "$MODEL" --heads $((2 * N)) --kv-heads "$N" --hidden $((128 * N))
fi
if { has preflight || has tp; } && [ ! -x "$SV/bin/ft" ]; then
  bad "no FreeToken serve venv at $SV (run the build part first): preflight and tp not run"
fi

# The box's manifest: FreeToken over every card, NVLink multicast off for the engine and its ranks.
DOCTOR_REHEARSAL=""; [ -n "${REHEARSAL:-}" ] && DOCTOR_REHEARSAL='checks = ["gpu"]  # REHEARSAL on a CPU machine'
cat >"$WORK/serve-tp.toml" <<EOF
[stack]
name = "freetoken-tiny-tp$N"
requirements = []
[doctor]
gpus = $N
$DOCTOR_REHEARSAL
[serve]
command = ["$SV/bin/ft", "serve", "--model-path", "{model}", "--port", "{port}", "--gpu", "$GPU_LIST", "--tensor-parallel-size", "$N", "--memory-ratio", "0.5", "--max-running-requests", "8"]
ready = "health"
url = "http://127.0.0.1:18933"
timeout = 420
[serve.env]
NCCL_NVLS_ENABLE = "0"
TORCH_SYMM_MEM_DISABLE_MULTICAST = "1"
NVSHMEM_DISABLE_NVLS = "1"
EOF
if [ -x "$SV/bin/ft" ]; then
  # nvcc as `wh env` puts it on PATH: FreeToken compiles pynccl.cu with it at TP > 1.
  $WH env --python "$SPY" --json >"$OUT/t-env.json" 2>"$OUT/t-env.stderr"
  eval "$($WH env --python "$SPY" 2>>"$OUT/t-env.stderr")"
  NVCC=$(command -v nvcc)
  NO_WHEEL_NVCC="none (no nvidia-cuda-nvcc wheel: the nvcc already on PATH is used)"
  ENV_NVCC=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1])).get('nvcc') or '')" "$OUT/t-env.json" 2>/dev/null)
  say "wh env: nvcc on PATH = ${NVCC:-none} ($(nvcc --version 2>/dev/null | grep -oE 'release [0-9.]+' | head -1)); wh env --json nvcc: ${ENV_NVCC:-$NO_WHEEL_NVCC}"
  [ -n "$NVCC" ] || bad "T0 no nvcc on PATH after wh env: FreeToken cannot compile pynccl.cu at TP $N"
  [ -z "$ENV_NVCC" ] || [ "$(realpath "$ENV_NVCC")" = "$(realpath "$NVCC")" ] || bad "T0 wh env names $ENV_NVCC but PATH finds $NVCC first"
fi

# --- preflight: a card held by another process -------------------------------------------------------
if has preflight && [ -x "$SV/bin/ft" ]; then
  "$PY" -c "
import time, torch
x = torch.empty(6 << 30, dtype=torch.uint8, device='cuda:$LAST'); torch.cuda.synchronize()
print('holding 6 GiB on cuda:$LAST', flush=True); time.sleep(300)" >"$OUT/p-hog.log" 2>&1 &
  HOG=$!
  for _ in $(seq 90); do
    used=$(smi_used | awk -F, -v g=$LAST '$1 == g {print $2}')
    [ "${used:-0}" -gt 4096 ] && break; sleep 1
  done
  say "hog pid $HOG holds ${used:-?} MiB on GPU $LAST: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"
  $WH serve "$WORK/serve-tp.toml" --model "$MODEL" --gpus "$N" --python "$SPY" --log "$OUT/p-refused.log" --detach \
    >"$OUT/p-refused.json" 2>"$OUT/p-refused.stderr"; rc=$?
  MSG=$(grep -E "GPU $LAST .*already has" "$OUT/p-refused.stderr" | head -1)
  [ $rc = 1 ] && [[ $MSG == *"held by pid $HOG"* ]] && [ ! -e "$OUT/p-refused.log" ] \
    && pass "P1 refused before launch: ${MSG#*- }" || bad "P1 serve with GPU $LAST held: rc=$rc $(tail -4 "$OUT/p-refused.stderr" | tr '\n' ';')"
  kill "$HOG"; wait "$HOG" 2>/dev/null
  for _ in $(seq 30); do
    [ "$(smi_used | awk -F, -v g=$LAST '$1 == g {print $2}')" -lt 1024 ] && break; sleep 1
  done
fi

# --- tp: FreeToken over N cards ----------------------------------------------------------------------
if has tp && [ -x "$SV/bin/ft" ]; then
  T0=$(date +%s)
  timeout 480 $WH serve "$WORK/serve-tp.toml" --model "$MODEL" --gpus "$N" --python "$SPY" --log "$OUT/t-serve.log" \
    --detach --smoke --json >"$OUT/t-serve.json" 2>"$OUT/t-serve.stderr"; rc=$?
  FACTS=$("$PY" -c "
import json,sys
d = json.load(open(sys.argv[1])); s = d.get('smoke') or {}
print(f\"ready in {d.get('ready_s')} s; model {s.get('model')}; {s.get('tokens')} tokens; TTFT {s.get('ttft_s')} s; decode {s.get('decode_tok_s')} tok/s\")" "$OUT/t-serve.json" 2>/dev/null)
  say "serve TP=$N: rc=$rc in $(( $(date +%s) - T0 )) s (preflight with the doctor included); ${FACTS:-$(tail -4 "$OUT/t-serve.stderr" | cut -c1-200 | tr '\n' ';')}"
  [ $rc = 0 ] && grep -q '"tokens": [1-9]' "$OUT/t-serve.json" && pass "T1 launched with GPU $LAST free; ready on /health, smoke streamed tokens" \
    || bad "T1 serve TP=$N: $(grep -iE 'error|Traceback' "$OUT/t-serve.log" | tail -3 | cut -c1-200 | tr '\n' ';')"
  grep -iE "pynccl|nvcc" "$OUT/t-serve.log" | head -5 >"$OUT/t-pynccl.txt"
  say "engine log on the runtime nvcc build: $(head -2 "$OUT/t-pynccl.txt" | cut -c1-160 | tr '\n' ';')"
  LEADER=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['pid'])" "$OUT/t-serve.json" 2>/dev/null)
  nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits >"$OUT/t-apps.csv"
  nvidia-smi --query-gpu=index,uuid,memory.used --format=csv,noheader,nounits >"$OUT/t-mem.csv"
  RANKS=$(cut -d, -f1 "$OUT/t-apps.csv" | tr -d ' ' | sort -u | tr '\n' ' ')
  GROUP=$("$PY" -c "
import os, sys
for d in os.listdir('/proc'):
    try:
        if d.isdigit() and os.getpgid(int(d)) == int(sys.argv[1]): print(d)
    except OSError: pass" "${LEADER:-0}" | tr '\n' ' ')  # every process of the engine group: ranks, tokenizer, ...
  MEM=$(cut -d, -f3 "$OUT/t-mem.csv" | tr -d ' ' | tr '\n' ' ')
  say "per-rank GPU memory (MiB, GPU 0..$LAST): $MEM; rank pids (nvidia-smi): $RANKS; engine's process group: $GROUP"
  "$PY" -c "import sys; m = [int(x) for x in sys.argv[1].split()]; sys.exit(0 if len(m) == $N and min(m) > 1024 and (max(m) - min(m)) <= 0.05 * max(m) else 1)" "$MEM" \
    && [ "$(echo $RANKS | wc -w)" -ge "$N" ] && pass "T2 the same memory on every rank: $MEM MiB ($(echo $RANKS | wc -w) rank processes)" \
    || bad "T2 per-rank memory $MEM MiB, rank pids $RANKS"
  NV_BAD=""
  for pid in $(echo $LEADER $RANKS $GROUP | tr ' ' '\n' | sort -u); do
    envs=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort | tr '\n' ' ')
    [ "$envs" = "NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 " ] || NV_BAD+="pid $pid: '${envs}' "
    nv=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^PATH=//p' | tr ':' '\n' | while read -r d; do [ -x "$d/nvcc" ] && echo "$d/nvcc" && break; done)
    [ "$nv" = "${NVCC:-}" ] || NV_BAD+="pid $pid: nvcc ${nv:-none} "
  done
  [ -z "$NV_BAD" ] && pass "T3 NVLink multicast off and wh env's nvcc first on PATH in the engine and all its processes ($(echo $LEADER $RANKS $GROUP | tr ' ' '\n' | sort -u | wc -l): $GROUP)" \
    || bad "T3 engine environment: $NV_BAD"
  $WH stop --json >"$OUT/t-stop.json" 2>"$OUT/t-stop.stderr"; rc=$?
  say "stop: rc=$rc $(tail -1 "$OUT/t-stop.stderr" | cut -c1-160)"
  sleep 2
  LEFT=""; for pid in $LEADER $RANKS $GROUP; do [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && LEFT+="$pid "; done
  APPS=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')
  AFTER=$(smi_used | cut -d, -f2 | tr '\n' ' ')
  [ $rc = 0 ] && [ -z "$LEFT" ] && [ -z "$APPS" ] && "$PY" -c "import sys; sys.exit(0 if max(int(x) for x in sys.argv[1].split()) < 1024 else 1)" "$AFTER" \
    && pass "T4 wh stop: no rank process left, no GPU memory in use (MiB after: $AFTER)" \
    || bad "T4 after wh stop: processes left '$LEFT', compute apps '$APPS', MiB $AFTER"
fi

# --- fleet: all cards vs two of them, compared ---------------------------------------------------------
if has fleet; then
  DPY=$PY; [ -x "$SPY" ] && DPY=$SPY
  SUB="0,1"; [ "$N" = 2 ] && SUB="0"
  WH_NODE_NAME=all-gpus $WH doctor --python "$DPY" --json >"$OUT/f-all.json" 2>"$OUT/f-all.stderr"
  CUDA_VISIBLE_DEVICES=$SUB WH_NODE_NAME="gpus-$SUB" $WH doctor --python "$DPY" --json >"$OUT/f-sub.json" 2>"$OUT/f-sub.stderr"
  $WH doctor compare --json "$OUT/f-all.json" "$OUT/f-sub.json" >"$OUT/f-compare.json" 2>"$OUT/f-compare.stderr"; rc=$?
  LINES=$("$PY" -c "import json,sys; print('\n'.join(d['line'] for d in json.load(open(sys.argv[1]))['differences']))" "$OUT/f-compare.json" 2>/dev/null)
  say "doctor compare (rc=$rc): $(echo "$LINES" | tr '\n' ';')"
  WANT="GPU count: $N on all-gpus; $(echo "$SUB" | tr ',' '\n' | wc -l) on gpus-$SUB"
  OTHER=$(echo "$LINES" | grep -v -F "$WANT" | grep -v '^$')
  # with one card left (N=2) the interconnect goes too: one more difference, expected
  [ "$N" = 2 ] && OTHER=$(echo "$OTHER" | grep -vE '^(interconnect|gpu:interconnect):')
  [ $rc = 1 ] && echo "$LINES" | grep -qxF "$WANT" && [ -z "$OTHER" ] && pass "F1 the GPU count is the only difference: $WANT" \
    || bad "F1 doctor compare rc=$rc: $(echo "$LINES" | tr '\n' ';')"
fi

summary "several GPUs ($N) on the box"
exit $FAIL
