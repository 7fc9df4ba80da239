#!/usr/bin/env bash
# FreeToken built from source on the offline H200 box, installed, and judged by the doctor.
#
#   bash tests/device/freetoken.sh [MIRROR] [WHEELHOUSE_WITH_BOOTSTRAP]
#
# MIRROR is a bare git mirror of FreeToken carried in the tree (.device/freetoken.git, ~3 MB; made on
# the networked host with `git clone --mirror`). Nothing is fetched: the recipe names the mirror as
# its repo and the mirror's HEAD as its commit.
#   1. wh build (PEP 517, no isolation, soname links) against the image's torch 2.11+cu130 and nvcc 13.0,
#      in a venv made by `wh install --venv --system-site-packages` from the image venv (so the
#      build sees the image's setuptools, not the base system's);
#   2. offline, wh build lists the engine's runtime requirements the wheelhouse lacks and exits non-zero,
#      then --allow-incomplete keeps the wheel;
#   3. the engine installs (its requirements are too big to carry here, so the install is told to
#      accept them missing) and the doctor: native lists freetoken.kernel._pinned_tensor and _cpu_moe
#      as loaded, deps names every missing requirement, kernels lists the sm of torch's and triton's
#      libraries and is ok on sm_90.
# Evidence in $OUT; a summary at the end.
set -u
PY=${PY:-/opt/torch/.venv/bin/python3}
WH=${WH:-/tmp/whv/bin/wh}
MIRROR=$(realpath "${1:-.device/freetoken.git}")
BOX_WH=${2:-${WH_DIR:-}}
OUT=${OUT:-/tmp/wh-freetoken-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/wh-ft.XXXX)
declare -a SUMMARY=()
FAIL=0
say() { SUMMARY+=("$*"); echo "== $*" >&2; }
bad() { FAIL=1; say "FAIL $*"; }
[ -x "$WH" ] || WH="$PY -m wheelhouse"
[ -d "$MIRROR" ] || { echo "FAIL: no FreeToken mirror at $MIRROR"; exit 1; }
COMMIT=$(git --git-dir "$MIRROR" rev-parse HEAD)
say "FreeToken mirror at $COMMIT; wh: $($WH --version 2>&1)"

# 1. the build venv: made by wh itself, keeping the image's torch/setuptools/nvidia libs
BV="$WORK/bv"
if [ -n "$BOX_WH" ] && [ -e "$BOX_WH" ]; then  # a wheelhouse folder, or its archive
  $WH install "$BOX_WH" --venv "$BV" --system-site-packages --python "$PY" >"$OUT/bv-install.log" 2>&1 \
    || bad "build venv: wh install rc=$? $(tail -2 "$OUT/bv-install.log")"
else
  "$PY" -m venv --without-pip --system-site-packages "$BV"
fi
BPY="$BV/bin/python"
"$BPY" -c "import setuptools, torch; print('build venv sees setuptools', setuptools.__version__, 'torch', torch.__version__)" \
  >"$OUT/bv.txt" 2>&1; say "$(cat "$OUT/bv.txt" | tail -1)"

cat >"$WORK/freetoken.toml" <<EOF
[engine]
name = "freetoken"
repo = "$MIRROR"
commit = "$COMMIT"

[engine.build]
subdirectory = "."
no-build-isolation = true
link-sonames = true
EOF
HOUSE="$WORK/house"
t0=$(date +%s)
$WH build "$WORK/freetoken.toml" -o "$HOUSE" --python "$BPY" --cache-dir "$WORK/cache" --json \
  >"$OUT/build.json" 2>"$OUT/build.stderr"; rc=$?
say "build (offline, engine requirements not in the wheelhouse): rc=$rc in $(( $(date +%s) - t0 ))s"
grep -iE "missing|requirement|error|hint" "$OUT/build.stderr" | head -12 | sed 's/^/    /' >&2
if [ $rc -ne 0 ]; then
  MISSING_NAME=pyzmq; [ "${DELTA:-}" = 1 ] && MISSING_NAME=flashlib
  if grep -qi "$MISSING_NAME" "$OUT/build.stderr"; then say "PASS 2a offline build names the missing runtime requirements ($MISSING_NAME among them)"
  else bad "2a build rc=$rc: $(tail -4 "$OUT/build.stderr")"; fi
  $WH build "$WORK/freetoken.toml" -o "$HOUSE" --python "$BPY" --cache-dir "$WORK/cache" --json --allow-incomplete \
    >"$OUT/build.json" 2>"$OUT/build2.stderr"; rc=$?
  say "build --allow-incomplete: rc=$rc"
else
  bad "2a build exited 0 although the wheelhouse lacks FreeToken's requirements"
fi
WHEEL=$(ls "$HOUSE"/wheels/freetoken-*.whl 2>/dev/null | head -1)
if [ -n "$WHEEL" ]; then
  say "PASS 1 built $(basename "$WHEEL"): $(unzip -l "$WHEEL" | grep -oE 'freetoken/kernel/_[a-z_]+\.[^ ]*\.so' | tr '\n' ' ')"
else
  bad "1 no FreeToken wheel: $(tail -8 "$OUT/build.stderr" "$OUT"/build2.stderr 2>/dev/null)"
fi
cp "$HOUSE"/logs/*.log "$OUT/" 2>/dev/null
$WH links --undo --python "$BPY" >"$OUT/links-undo-bv.txt" 2>&1

# 3. install the engine and ask the doctor
if [ -n "$WHEEL" ]; then
  SV="$WORK/serve"
  # DELTA=1: BOX_WH is a delta of FreeToken's runtime requirements (tests/device/delta.sh): installed together
  # with the engine, only what the delta left out (flashlib) may be missing.
  EXTRA=(); [ "${DELTA:-}" = 1 ] && EXTRA=("$BOX_WH")
  $WH install "$HOUSE" "${EXTRA[@]}" --venv "$SV" --system-site-packages --python "$PY" --allow-missing --json >"$OUT/install.json" 2>"$OUT/install.stderr"; rc=$?
  say "install --allow-missing: rc=$rc $(grep -iE 'missing' "$OUT/install.stderr" | head -1)"
  t0=$(date +%s)
  $WH doctor --python "$SV/bin/python" --json --junit "$OUT/doctor.junit.xml" >"$OUT/doctor.json" 2>"$OUT/doctor.stderr"; rc=$?
  say "doctor: rc=$rc in $(( $(date +%s) - t0 ))s"
  "$PY" - "$OUT/doctor.json" >"$OUT/doctor-summary.txt" 2>&1 <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
res = d.get("results", [])
from collections import Counter
print("summary:", dict(Counter(r.get("verdict") for r in res)))
for r in res:
    i = r.get("id", "")
    if i.startswith(("native:freetoken", "deps", "kernels", "sharedlibs")) or r.get("verdict") in ("fail", "error"):
        print(f"{r.get('verdict'):5} {i}: {str(r.get('evidence'))[:1500]}")
PYEOF
  cat "$OUT/doctor-summary.txt" >&2
  grep -q "_pinned_tensor" "$OUT/doctor-summary.txt" && grep -q "_cpu_moe" "$OUT/doctor-summary.txt" \
    && say "PASS 3a native:freetoken names _pinned_tensor and _cpu_moe: $(grep 'native:freetoken' "$OUT/doctor-summary.txt" | head -1 | cut -c1-200)" \
    || bad "3a native:freetoken does not list both extension modules"
  if [ "${DELTA:-}" = 1 ]; then
    DEPS=$(grep -A20 -E "^fail +deps:freetoken" "$OUT/doctor-summary.txt" | head -20)
    echo "$DEPS" | grep -q "flashlib" && ! echo "$DEPS" | grep -qE "pyzmq|fastapi|numpy" \
      && say "PASS 3b deps names only what the delta left out: $(echo "$DEPS" | head -1 | cut -c1-300)" \
      || bad "3b deps with the delta: $(echo "$DEPS" | head -3 | cut -c1-400)"
  else
  grep -A20 -E "^fail +deps:freetoken" "$OUT/doctor-summary.txt" | grep -q "pyzmq" \
    && say "PASS 3b deps fails naming the missing requirements: $(grep -E '^fail +deps' "$OUT/doctor-summary.txt" | head -1 | cut -c1-300)" \
    || bad "3b no deps failure naming pyzmq"
  fi
  grep -E "^ok +kernels" "$OUT/doctor-summary.txt" | grep -qE "torch|triton" \
    && say "PASS 3c kernels ok on sm_90: $(grep -E '^ok +kernels' "$OUT/doctor-summary.txt" | head -2 | cut -c1-300 | tr '\n' ' ')" \
    || bad "3c no ok kernels check naming torch/triton"
  if command -v cuobjdump >/dev/null; then
    SO=$("$SV/bin/python" -c "import torch, pathlib; print(next(pathlib.Path(torch.__file__).parent.glob('lib/libtorch_cuda.so')))" 2>/dev/null)
    [ -n "$SO" ] && cuobjdump --list-elf "$SO" 2>/dev/null | grep -oE "sm_[0-9]+a?" | sort -u | tr '\n' ' ' >"$OUT/cuobjdump-torch.txt"
    say "cuobjdump --list-elf libtorch_cuda.so: $(cat "$OUT/cuobjdump-torch.txt" 2>/dev/null)"
  fi
fi
printf '%s\n' "${SUMMARY[@]}" >"$OUT/summary.txt"
echo; echo "==== FreeToken on the box: $([ $FAIL -eq 0 ] && echo PASS || echo FAIL)"; printf '  %s\n' "${SUMMARY[@]}"
rm -rf "$WORK"
exit $FAIL
