#!/usr/bin/env bash
# A delta wheelhouse on the offline H200 box: staged for the image's captured profile (only what the image
# lacks or must change), carried as ONE packed archive, verified, installed offline over the image's own torch.
#
# On the networked host (FreeToken's runtime requirements from the mirror's pyproject.toml, less flashlib,
# whose nvidia-cutlass-dsl-libs wheel alone is 92 MB, more than the 64 MiB that can be carried):
#   git --git-dir .device/freetoken.git show HEAD:pyproject.toml | python3 tests/device/runtime_reqs.py \
#       --drop flashlib > .device/ft-runtime.txt
#   .venv/bin/wh stage -r .device/ft-runtime.txt --target manifests/targets/h200-offline.json -o .device/ft-delta
#   .venv/bin/wh pack .device/ft-delta -o .device/ft-delta.tar
# then on the box (repo root as cwd, .device/ft-delta.tar* and .device/freetoken.git carried):
#   bash tests/device/delta.sh .device/ft-delta.tar
# Evidence in $OUT; a summary at the end. Exit 1 when any step failed.
set -u
ARCHIVE=$(realpath "${1:-.device/ft-delta.tar}")
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-delta-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/wh-delta.XXXX)
declare -a SUMMARY=()
FAIL=0
say() { SUMMARY+=("$*"); echo "== $*" >&2; }
bad() { FAIL=1; say "FAIL $*"; }
pass() { say "PASS $*"; }

# 1. bootstrap wh from the archive's bootstrap/ (plain tar: the box needs nothing but tar and the image's pip)
mkdir -p "$WORK/boot"
tar -xf "$ARCHIVE" -C "$WORK/boot" --wildcards '*bootstrap/*' 2>"$OUT/tar.err" || bad "tar bootstrap/: $(cat "$OUT/tar.err")"
BOOT=$(dirname "$(find "$WORK/boot" -name 'wh-*.whl' | head -1)")
"$PY" -m venv --without-pip "$WORK/whv"
# what the stage printed: 'wh[fast]' where bootstrap/ carries the fast extra (zlib-ng, ISA-L), else wh
SPEC=wh; ls "$BOOT" | grep -q '^zlib_ng-' && SPEC='wh[fast]'
"$PY" -m pip --python "$WORK/whv/bin/python" install -q --no-index --find-links "$BOOT" "$SPEC" >"$OUT/bootstrap.log" 2>&1 \
  && pass "1 wh bootstrapped offline from the archive: $("$WORK/whv/bin/wh" --version)" || bad "1 bootstrap: $(tail -3 "$OUT/bootstrap.log")"
WH="$WORK/whv/bin/wh"

# 2. verify the archive before anything is installed, and a tampered copy is refused
$WH verify "$ARCHIVE" --json >"$OUT/verify.json" 2>"$OUT/verify.err"; rc=$?
[ $rc -eq 0 ] && pass "2a wh verify: rc=0 $(tail -1 "$OUT/verify.err")" || bad "2a wh verify rc=$rc: $(tail -3 "$OUT/verify.err")"
cp "$ARCHIVE" "$WORK/tampered.tar"; cp "$ARCHIVE.sha256" "$WORK/tampered.tar.sha256" 2>/dev/null
printf 'X' | dd of="$WORK/tampered.tar" bs=1 seek=$(( $(stat -c %s "$ARCHIVE") / 2 )) conv=notrunc status=none
$WH verify "$WORK/tampered.tar" >"$OUT/verify-tampered.txt" 2>&1; rc=$?
[ $rc -ne 0 ] && pass "2b a flipped byte is refused: rc=$rc $(grep -m1 -iE 'error|sha256' "$OUT/verify-tampered.txt")" \
  || bad "2b tampered archive verified clean"

# 3. a plain venv (no image packages) must be refused: the delta assumed the image
$WH install "$ARCHIVE" --venv "$WORK/plain" --python "$PY" >"$OUT/install-plain.txt" 2>&1; rc=$?
[ $rc -ne 0 ] && [ ! -e "$WORK/plain/bin/python" ] \
  && pass "3 plain venv refused before any write: rc=$rc $(grep -m1 -i error "$OUT/install-plain.txt" | cut -c1-220)" \
  || bad "3 plain venv: rc=$rc $(tail -2 "$OUT/install-plain.txt")"

# 4. the real install: a venv that keeps the image's packages
SV="$WORK/serve"
t0=$(date +%s%N)
$WH install "$ARCHIVE" --venv "$SV" --system-site-packages --python "$PY" --json >"$OUT/install.json" 2>"$OUT/install.err"; rc=$?
t1=$(date +%s%N)
[ $rc -eq 0 ] && pass "4a install from the archive: rc=0 in $(( (t1 - t0) / 1000000 )) ms: $(grep -m1 '^installed' "$OUT/install.err")" \
  || bad "4a install rc=$rc: $(tail -4 "$OUT/install.err")"
"$SV/bin/python" - >"$OUT/which.txt" 2>&1 <<'PYEOF'
import importlib.metadata as md, torch, numpy, fastapi, zmq, transformers
print("torch", torch.__version__, torch.__file__)
print("numpy", numpy.__version__, numpy.__file__)
print("fastapi", fastapi.__version__, fastapi.__file__)
print("pyzmq", zmq.__version__, zmq.__file__)
print("transformers", transformers.__version__, transformers.__file__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PYEOF
cat "$OUT/which.txt" >&2
grep -q "^torch .*/opt/torch/.venv/" "$OUT/which.txt" && pass "4b the image's own torch is used: $(grep '^torch' "$OUT/which.txt")" \
  || bad "4b torch not the image's: $(head -2 "$OUT/which.txt")"
grep -q "^fastapi .*$SV/" "$OUT/which.txt" && pass "4c the delta's packages come from the venv: $(grep -E '^(fastapi|numpy)' "$OUT/which.txt" | tr '\n' ' ')" \
  || bad "4c fastapi not from the delta venv: $(cat "$OUT/which.txt" | tail -3)"

# 5. the doctor on the result
$WH doctor --python "$SV/bin/python" --json --junit "$OUT/doctor.junit.xml" >"$OUT/doctor.json" 2>"$OUT/doctor.err"; rc=$?
"$PY" - "$OUT/doctor.json" >"$OUT/doctor-summary.txt" 2>&1 <<'PYEOF'
import json, sys
from collections import Counter
d = json.load(open(sys.argv[1]))
res = d.get("results", [])
print("summary:", dict(Counter(r.get("verdict") for r in res)))
for r in res:
    if r.get("verdict") in ("fail", "error", "warn"):
        print(f"{r.get('verdict'):5} {r.get('id')}: {str(r.get('evidence'))[:400]}")
PYEOF
cat "$OUT/doctor-summary.txt" >&2
[ $rc -eq 0 ] && pass "5 doctor green: rc=0 $(head -1 "$OUT/doctor-summary.txt")" || bad "5 doctor rc=$rc: $(head -6 "$OUT/doctor-summary.txt")"

# 6. the engine on top: FreeToken built against this delta (its build venv made from the same archive)
if [ -d .device/freetoken.git ]; then
  OUT="$OUT/freetoken" WH="$WH" DELTA=1 timeout 400 bash tests/device/freetoken.sh .device/freetoken.git "$ARCHIVE" \
    >"$OUT/freetoken.log" 2>&1; rc=$?
  [ $rc -eq 0 ] && pass "6 FreeToken over the delta: $(grep -E 'PASS 3b|deps' "$OUT/freetoken/summary.txt" | head -1 | cut -c1-300)" \
    || bad "6 FreeToken over the delta rc=$rc: $(grep FAIL "$OUT/freetoken/summary.txt" 2>/dev/null | head -3)"
fi

printf '%s\n' "${SUMMARY[@]}" >"$OUT/summary.txt"
echo; echo "==== delta on the box: $([ $FAIL -eq 0 ] && echo PASS || echo FAIL)"; printf '  %s\n' "${SUMMARY[@]}"
rm -rf "$WORK"
exit $FAIL
