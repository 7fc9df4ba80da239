# Shared pieces of the device scripts (sourced, not run): PASS/FAIL bookkeeping, reading doctor reports, and the
# FreeToken steps evidence.sh and multigpu.sh both take: wh bootstrapped offline from a wheelhouse's bootstrap/,
# a build venv, `wh build` of FreeToken from a bare mirror, the serve venv, a tiny model made on the box.
#
# Expects: PY (the image's interpreter), OUT, WORK. Sets: SUMMARY, FAIL; WH (bootstrap_wh); COMMIT, WHEEL,
# BUILD_S (build_freetoken); SPY (install_engine).
declare -a SUMMARY=()
FAIL=0
say() { SUMMARY+=("$*"); echo "== $*" >&2; }
bad() { FAIL=1; say "FAIL $*"; }
pass() { say "PASS $*"; }
count() {  # count VERDICT REPORT.json -> how many results have that verdict
  "$PY" -c "import json,sys; print(sum(1 for r in json.load(open(sys.argv[2])).get('results', []) if r.get('verdict') == sys.argv[1]))" "$1" "$2" 2>/dev/null || echo "?"
}
fails() {  # fails REPORT.json -> one line per failing check
  "$PY" -c "
import json,sys
for r in json.load(open(sys.argv[1])).get('results', []):
    if r.get('verdict') in ('fail', 'error'): print(r.get('id'), '::', str(r.get('evidence'))[:300])" "$1" 2>/dev/null
}
check_of() {  # check_of REPORT.json ID -> "verdict :: evidence" of that check
  "$PY" -c "
import json,sys
for r in json.load(open(sys.argv[1])).get('results', []):
    if r.get('id') == sys.argv[2]: print(r.get('verdict'), '::', r.get('evidence'))" "$1" "$2" 2>/dev/null
}

bootstrap_wh() {  # bootstrap_wh WH_DIR WHV -> WH: wh itself, offline, from the wheelhouse's bootstrap/
  local wh_dir=$1 whv=$2
  if [ ! -x "$whv/bin/wh" ]; then
    "$PY" -m venv --without-pip "$whv"
    (cd "$wh_dir" && "$PY" -m pip --python "$whv/bin/python" install -q --no-index --find-links bootstrap/ wh) \
      >"$OUT/bootstrap.log" 2>&1 || bad "bootstrap: $(tail -3 "$OUT/bootstrap.log")"
  fi
  WH="$whv/bin/wh"
  say "wh $($WH --version 2>&1); python $("$PY" -c 'import sys; print(sys.version.split()[0])')"
}

build_freetoken() {  # build_freetoken LABEL WH_DIR MIRROR BV HOUSE: build venv, recipe, wh build -> WHEEL in HOUSE
  local label=$1 wh_dir=$2 mirror=$3 bv=$4 house=$5 t0 rc
  COMMIT=$(git --git-dir "$mirror" rev-parse HEAD)
  rm -rf "$bv" "$house"
  t0=$(date +%s)
  $WH install "$wh_dir" --venv "$bv" --system-site-packages --python "$PY" --json >"$OUT/b-bv.json" 2>"$OUT/b-bv.stderr" \
    || bad "build venv: wh install rc=$? $(tail -2 "$OUT/b-bv.stderr")"
  say "build venv from the carried wheelhouse in $(( $(date +%s) - t0 )) s"
  cat >"$WORK/freetoken.toml" <<EOF
[engine]
name = "freetoken"
repo = "$mirror"
commit = "$COMMIT"

[engine.build]
subdirectory = "."
no-build-isolation = true
link-sonames = true
[engine.build.env]
MAX_JOBS = "16"
EOF
  cp -a "$wh_dir" "$house"
  t0=$(date +%s)
  $WH build "$WORK/freetoken.toml" -o "$house" --python "$bv/bin/python" --cache-dir "$WORK/cache" --json \
    >"$OUT/b-build.json" 2>"$OUT/b-build.stderr"; rc=$?
  BUILD_S=$(( $(date +%s) - t0 ))
  WHEEL=$(ls "$house"/wheels/freetoken-*.whl 2>/dev/null | head -1)
  [ $rc = 0 ] && [ -n "$WHEEL" ] && pass "$label wh build FreeToken $COMMIT in ${BUILD_S} s: $(basename "$WHEEL")" \
    || bad "$label wh build rc=$rc: $(grep -iE 'error|missing|hint' "$OUT/b-build.stderr" | head -4 | cut -c1-200 | tr '\n' ';')"
  cp "$house"/logs/*.log "$OUT/" 2>/dev/null
  $WH links --undo --python "$bv/bin/python" >/dev/null 2>&1
}

install_engine() {  # install_engine LABEL HOUSE SV -> SPY: the engine and its delta into a serve venv, imports shown
  local label=$1 house=$2 sv=$3 t0 rc
  rm -rf "$sv"
  t0=$(date +%s)
  $WH install "$house" --venv "$sv" --system-site-packages --python "$PY" --json >"$OUT/b-install.json" 2>"$OUT/b-install.stderr"; rc=$?
  [ $rc = 0 ] && pass "$label wh install of engine + delta into $sv in $(( $(date +%s) - t0 )) s: $(grep -E '^installed|installed [0-9]' "$OUT/b-install.stderr" | head -1)" \
    || bad "$label wh install rc=$rc: $(tail -3 "$OUT/b-install.stderr" | tr '\n' ';')"
  SPY="$sv/bin/python"
  "$SPY" -c "import flashlib, freetoken, torch; print('flashlib', flashlib.__file__); print('torch', torch.__version__, torch.__file__)" >"$OUT/b-imports.txt" 2>&1 \
    && say "engine imports: $(tr '\n' ' ' <"$OUT/b-imports.txt" | cut -c1-240)" || bad "engine imports: $(tail -2 "$OUT/b-imports.txt")"
}

make_tiny_model() {  # make_tiny_model DIR [--heads H --kv-heads K --hidden D]: a random-weight qwen2 made here
  local dir=$1; shift
  "$PY" "$(dirname "${BASH_SOURCE[0]}")/tiny_qwen2.py" "$dir" "$@" >"$OUT/b-model.log" 2>&1 \
    && say "tiny model: $(tail -1 "$OUT/b-model.log"), $(du -sh "$dir" | cut -f1)" || bad "tiny model: $(tail -3 "$OUT/b-model.log")"
}

summary() {  # summary TITLE: the PASS/FAIL lines again, in $OUT/summary.txt; returns FAIL
  echo
  echo "==== $1 ===="
  printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
  [ $FAIL = 0 ] && echo "RESULT: OK" || echo "RESULT: FAILED"
  return $FAIL
}
