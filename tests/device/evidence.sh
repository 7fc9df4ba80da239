#!/usr/bin/env bash
# The doctor judged by evidence, on the offline H200 box, and the real FreeToken serving a model made there.
#
#   PART=A bash tests/device/evidence.sh WHEELHOUSE [MIRROR]    # the stock image only (~1 min)
#   PART=B bash tests/device/evidence.sh WHEELHOUSE [MIRROR]    # FreeToken built, installed, served (~6 min)
#
# WHEELHOUSE: FreeToken's runtime requirements staged on the networked host as a delta against the box's
# captured profile, flashlib kept and its nvidia-cutlass-dsl left out by the manifest (manifests/freetoken-h200.toml):
#   .venv/bin/wh stage manifests/freetoken-h200.toml -o .device/ft-wh
# MIRROR: a bare git mirror of FreeToken (`git clone --mirror`), ~3 MB, default .device/freetoken.git.
#
# Part A (the stock image, /opt/torch/.venv): `wh doctor` gives 0 fail, and `wh drop --dry-run` drops nothing.
# Part B: wh bootstrapped from the wheelhouse's bootstrap/; a build venv and a serve venv made by `wh install
#   --system-site-packages` (the image's torch kept); `wh build` of FreeToken from the mirror (PEP 517 against the
#   image's torch and nvcc); a tiny random-weight qwen2 checkpoint and a BPE tokenizer written on the box with the
#   image's transformers/tokenizers (nothing downloaded); `wh doctor` green; `wh serve` ready on FreeToken's own
#   /health; `wh smoke` streams tokens (TTFT, tok/s); `wh stop`. Then a findable-but-broken `sgl_kernel` is planted
#   (FreeToken probes it with find_spec and routes RMSNorm through it): the doctor is red, `wh drop` removes it, the
#   doctor is green again and FreeToken serves again.
# Evidence in $OUT; PASS/FAIL lines and a summary at the end; exit 1 when anything failed.
set -u
WH_DIR=$(realpath "${1:-.device/ft-wh}")
MIRROR=$(realpath "${2:-.device/freetoken.git}")
PART=${PART:-AB}
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-evidence-out}
mkdir -p "$OUT"
WORK=${WORK:-/tmp/wh-evidence}
mkdir -p "$WORK"
export WH_STATE_DIR="$WORK/state"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# --- wh itself, offline, from the wheelhouse's bootstrap/ ------------------------------------------------
bootstrap_wh "$WH_DIR" "$WORK/whv"

# --- Part A: the stock image -----------------------------------------------------------------------------
if [[ $PART == *A* ]]; then
  # The first run with empty caches (the stack check's digests, the doctor's verdict store: a site folder wh never
  # installed into keeps them under WH_CACHE_DIR), the second with nothing changed: it reuses what passed.
  export WH_CACHE_DIR="$WORK/doctor-cache"; rm -rf "$WH_CACHE_DIR"
  t0=$(date +%s.%N)
  $WH doctor --python "$PY" --json --junit "$OUT/a-doctor.junit.xml" >"$OUT/a-doctor.json" 2>"$OUT/a-doctor.stderr"; rc=$?
  t1=$(date +%s.%N)
  WH_DOCTOR_TRACE="$OUT/a-trace2.jsonl" $WH doctor --python "$PY" --json >"$OUT/a-doctor2.json" 2>/dev/null; rc2=$?
  t2=$(date +%s.%N)
  # A third run: the first one's imports wrote byte code (__pycache__) into the image's package folders, which the
  # second run sees as a change of the folders a probe searched; the third is the steady state.
  WH_DOCTOR_TRACE="$OUT/a-trace3.jsonl" $WH doctor --python "$PY" --json >"$OUT/a-doctor3.json" 2>/dev/null
  t3=$(date +%s.%N)
  secs=$("$PY" -c "print(f'{$t1-$t0:.1f} s first, {$t2-$t1:.1f} s again, {$t3-$t2:.1f} s a third time')")
  reuse=$("$PY" -c "
import json,sys
rs = [r for r in json.load(open(sys.argv[1])).get('results', []) if r.get('group') == 'native']
print(sum(len(r['data'].get('reused') or ()) for r in rs), 'import verdicts reused,',
      sum(len(r['data'].get('executed') or ()) for r in rs), 'executed')" "$OUT/a-doctor2.json" 2>/dev/null)
  say "stock image doctor: rc=$rc (again rc=$rc2), $(count ok "$OUT/a-doctor.json") ok, $(count warn "$OUT/a-doctor.json") warn, $(count fail "$OUT/a-doctor.json") fail; $secs (again: ${reuse:-?})"
  fails "$OUT/a-doctor.json" | head -20 | sed 's/^/    /' >&2
  # Why a stored verdict was executed again on the second and third runs (the trace's "stale" lines), by reason.
  for t in a-trace2 a-trace3; do
    say "  executed again ($t): $("$PY" -c "
import collections, json, sys
why = collections.Counter()
for line in open(sys.argv[1]):
    rec = json.loads(line)
    if 'stale' in rec:
        why[' '.join('%s=%s' % (k, str(v)[:80]) for k, v in sorted(rec.items()) if k != 'stale')] += 1
print(sum(why.values()), 'stale;', '; '.join('%d x %s' % (n, k) for k, n in why.most_common(4)))" "$OUT/$t.jsonl" 2>/dev/null)"
  done
  # Where each run's time went: the facts probe, whether each JIT probe was executed or reused, and the 8 slowest
  # checks with their seconds (from the JSON), per run.
  for f in a-doctor a-doctor2 a-doctor3; do
    say "  slowest checks ($f): $("$PY" -c "
import json,sys
d = json.load(open(sys.argv[1]))
rs = d.get('results', [])
jit = ['%s %s' % (r.get('id'), 'reused' if (r.get('data') or {}).get('reused_since') else r.get('verdict'))
       for r in rs if str(r.get('id')).startswith('jit:')]
print('facts probe %ss; %s; ' % ((d.get('facts') or {}).get('facts_seconds'), ', '.join(jit) or 'no jit')
      + ', '.join('%s %.1fs' % (r.get('id'), r.get('seconds') or 0) for r in sorted(rs, key=lambda r: -(r.get('seconds') or 0))[:8])
      + '; groups (start-end s): ' + ', '.join('%s %s-%s' % (g, *s) for g, s in sorted(
          ((d.get('facts') or {}).get('group_seconds') or {}).items(), key=lambda i: -i[1][-1])))" "$OUT/$f.json" 2>/dev/null)"
  done
  [ "$(count fail "$OUT/a-doctor.json")" = 0 ] && [ $rc -ne 1 ] && pass "A1 the stock image has no fail" || bad "A1 stock image: $(fails "$OUT/a-doctor.json" | head -5 | cut -c1-160 | tr '\n' ';')"
  "$PY" -c "
import json,sys
for r in json.load(open(sys.argv[1])).get('results', []):
    if r.get('verdict') == 'warn': print(r.get('id'), '::', str(r.get('evidence'))[:240])" "$OUT/a-doctor.json" >"$OUT/a-warns.txt" 2>/dev/null
  $WH drop --dry-run --python "$PY" --json >"$OUT/a-drop.json" 2>"$OUT/a-drop.stderr"; rc=$?
  WOULD=$("$PY" -c "
import json,sys
d = json.load(open(sys.argv[1]))
items = d.get('dropped') or d.get('would_drop') or d.get('drops') or []
print(len(items), ' '.join(str(i.get('distribution', i) if isinstance(i, dict) else i) for i in items))" "$OUT/a-drop.json" 2>/dev/null)
  say "stock image drop --dry-run: rc=$rc would drop: ${WOULD:-?}"
  [ "${WOULD%% *}" = 0 ] && pass "A2 drop --dry-run drops nothing on the stock image" || bad "A2 drop --dry-run: ${WOULD:-unreadable} $(tail -2 "$OUT/a-drop.stderr")"
fi

# --- Part B: FreeToken built, installed and served --------------------------------------------------------
if [[ $PART == *B* ]]; then
  [ -d "$MIRROR" ] || { bad "no FreeToken mirror at $MIRROR"; PART=; }
fi
if [[ $PART == *B* ]]; then
  BV="$WORK/bv"; SV="$WORK/serve"; HOUSE="$WORK/house"
  build_freetoken B1 "$WH_DIR" "$MIRROR" "$BV" "$HOUSE"

  install_engine B2 "$HOUSE" "$SV"
  "$SPY" -c "import importlib.util as u; print(u.find_spec('cutlass'))" >"$OUT/b-cutlass.txt" 2>&1
  say "nvidia-cutlass-dsl (excluded by the manifest) findable: $(cat "$OUT/b-cutlass.txt")"

  # A tiny random-weight qwen2 checkpoint and tokenizer, written here with the image's libraries.
  MODEL="$WORK/tiny-qwen2"
  make_tiny_model "$MODEL"  # 4 attention heads, 2 kv heads, hidden 512

  cat >"$WORK/serve.toml" <<EOF
[stack]
name = "freetoken-tiny-h200"
requirements = []
[doctor]
gpus = 1
sm = "9.0"
[serve]
command = ["$SV/bin/ft", "serve", "--model-path", "{model}", "--port", "{port}", "--tensor-parallel-size", "1", "--memory-ratio", "0.5", "--max-running-requests", "8"]
ready = "health"
url = "http://127.0.0.1:18919"
timeout = 540
EOF
  doctor_b() {  # doctor_b TAG -> rc; report in $OUT/b-doctor-TAG.json
    local t0 t1 rc
    t0=$(date +%s.%N)
    $WH doctor --python "$SPY" --json --junit "$OUT/b-doctor-$1.junit.xml" >"$OUT/b-doctor-$1.json" 2>"$OUT/b-doctor-$1.stderr"; rc=$?
    t1=$(date +%s.%N)
    say "doctor ($1): rc=$rc, $(count ok "$OUT/b-doctor-$1.json") ok, $(count warn "$OUT/b-doctor-$1.json") warn, $(count fail "$OUT/b-doctor-$1.json") fail in $("$PY" -c "print(f'{$t1-$t0:.1f}')") s"
    fails "$OUT/b-doctor-$1.json" | head -8 | sed 's/^/    /' >&2
    return $rc
  }
  serve_b() {  # serve_b TAG -> rc; ready seconds and smoke figures in the summary
    $WH serve "$WORK/serve.toml" --model "$MODEL" --python "$SPY" --log "$OUT/b-serve-$1.log" --detach --smoke --json \
      >"$OUT/b-serve-$1.json" 2>"$OUT/b-serve-$1.stderr"; local rc=$?
    local facts
    facts=$("$PY" -c "
import json,sys
d = json.load(open(sys.argv[1])); s = d.get('smoke') or {}
print(f\"ready in {d.get('ready_s')} s; model {s.get('model')}; {s.get('tokens')} tokens; TTFT {s.get('ttft_s')} s; decode {s.get('decode_tok_s')} tok/s\")" "$OUT/b-serve-$1.json" 2>/dev/null)
    say "serve ($1): rc=$rc; ${facts:-$(tail -4 "$OUT/b-serve-$1.stderr" | cut -c1-200 | tr '\n' ';')}"
    $WH stop --json >"$OUT/b-stop-$1.json" 2>"$OUT/b-stop-$1.stderr"
    say "stop ($1): $(tail -1 "$OUT/b-stop-$1.stderr" | cut -c1-160)"
    return $rc
  }
  doctor_b clean && pass "B3 doctor green on the FreeToken venv" || bad "B3 doctor on the FreeToken venv"
  serve_b clean && grep -q '"tokens": [1-9]' "$OUT/b-serve-clean.json" && pass "B4 FreeToken ready on /health and smoke streamed tokens" \
    || bad "B4 serve: $(grep -iE 'error|Traceback' "$OUT/b-serve-clean.log" | tail -3 | cut -c1-200 | tr '\n' ';')"

  # A findable-but-broken accelerator: sgl_kernel, installed as a distribution, whose import fails.
  SITE=$("$SPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  mkdir -p "$WORK/plant/sgl_kernel"
  printf 'int sgl_kernel_missing_symbol(void);\nint _entry(void) { return sgl_kernel_missing_symbol(); }\n' >"$WORK/plant/k.c"
  SUFFIX=$("$SPY" -c "import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])")
  gcc -shared -fPIC -Wl,--no-undefined -o /dev/null "$WORK/plant/k.c" 2>/dev/null  # (it must NOT link cleanly)
  gcc -shared -fPIC -o "$WORK/plant/sgl_kernel/common_ops$SUFFIX" "$WORK/plant/k.c"
  printf 'from sgl_kernel import common_ops  # a .so with an undefined symbol: the import fails\n' >"$WORK/plant/sgl_kernel/__init__.py"
  "$PY" - "$WORK/plant" "$SITE" "$SUFFIX" <<'PYEOF'
import base64, hashlib, shutil, sys
from pathlib import Path
plant, site, suffix = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
shutil.copytree(plant / "sgl_kernel", site / "sgl_kernel", dirs_exist_ok=True)
di = site / "sglang_kernel-0.4.5.dist-info"; di.mkdir(exist_ok=True)
(di / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 0.4.5\n")
(di / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: planted\nRoot-Is-Purelib: false\nTag: cp312-cp312-linux_x86_64\n")
(di / "INSTALLER").write_text("pip\n")
rows = []
for f in sorted([*(site / "sgl_kernel").iterdir(), di / "METADATA", di / "WHEEL", di / "INSTALLER"]):
    data = f.read_bytes()
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rows.append(f"{f.relative_to(site)},sha256={h},{len(data)}")
rows.append(f"{di.name}/RECORD,,")
(di / "RECORD").write_text("\n".join(rows) + "\n")
PYEOF
  "$SPY" -c "import importlib.util as u; print('find_spec:', u.find_spec('sgl_kernel') is not None); import sgl_kernel" >"$OUT/b-plant.txt" 2>&1
  say "planted sgl_kernel: $(grep find_spec "$OUT/b-plant.txt"), import: $(tail -1 "$OUT/b-plant.txt" | cut -c1-120)"
  doctor_b planted; rc=$?
  [ $rc = 1 ] && grep -q "sgl" "$OUT/b-doctor-planted.json" && pass "B5 doctor red naming sgl_kernel" || bad "B5 doctor with the planted sgl_kernel: rc=$rc"
  $WH drop --python "$SPY" --json >"$OUT/b-drop.json" 2>"$OUT/b-drop.stderr"; rc=$?
  "$SPY" -c "import importlib.util as u; print(u.find_spec('sgl_kernel'))" >"$OUT/b-after-drop.txt" 2>&1
  [ $rc = 0 ] && grep -q None "$OUT/b-after-drop.txt" && pass "B6 wh drop removed sglang-kernel: $(tail -2 "$OUT/b-drop.stderr" | cut -c1-160 | tr '\n' ' ')" \
    || bad "B6 wh drop rc=$rc: $(tail -3 "$OUT/b-drop.stderr" | tr '\n' ';') find_spec after: $(cat "$OUT/b-after-drop.txt")"
  doctor_b dropped && pass "B7 doctor green after the drop" || bad "B7 doctor after the drop"
  serve_b again && grep -q '"tokens": [1-9]' "$OUT/b-serve-again.json" && pass "B8 FreeToken serves again" || bad "B8 serve again"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >"$OUT/b-gpu-after.txt" 2>&1
  say "GPU processes after stop: $(cat "$OUT/b-gpu-after.txt" | tr '\n' ' ')"
fi

summary "evidence on the box"
exit $FAIL
