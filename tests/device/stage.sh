#!/usr/bin/env bash
# wh stage, proven on the offline GPU box (no network at all).
#
# A wheelhouse staged on the networked cp311 host FOR THIS BOX (cp312, from the
# captured profile) must, here and with no index:
#   1. carry a capture_target.py that runs on the box's python, and whose tags
#      accept every staged wheel (the compiled markupsafe one included);
#   2. verify: every file in pylock.toml has the sha256 and size it records;
#   3. bootstrap wh itself into a fresh venv with the one command in BOOTSTRAP.txt;
#   4. install the stack from wheels/ (pip --no-index) and import the compiled module;
#   5. serve as an index: the bootstrapped wh re-stages the same stack from the
#      carried simple/ index (file://), offline, with its own bootstrap rebuilt
#      from the INSTALLED wh (the RECORD-repack path), and gets the same hashes.
#
# Prerequisite, on the networked host (the lead), then carry the folder:
#   .venv/bin/wh stage manifests/demo.toml --target manifests/targets/h200-offline.json \
#       -o .device/stage-demo-wh
#   run(command="bash tests/device/stage.sh", carry=[".device/stage-demo-wh"])
set -u
PY=${PY:-/opt/torch/.venv/bin/python3}
WH_DIR=$(realpath "${WH_DIR:-.device/stage-demo-wh}")
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
LOG="$OUT/stage-device.log"
: >"$LOG"
work=$(mktemp -d)
fail=0
declare -a SUMMARY=()

step() {  # step NAME CMD...: run, log, remember PASS/FAIL
    local name=$1; shift
    local t0=$(date +%s.%N)
    echo "=== $name: $*" >>"$LOG"
    if "$@" >>"$LOG" 2>&1; then r=PASS; else r=FAIL; fail=1; fi
    local dt=$(python3 -c "print(f'{$(date +%s.%N)-$t0:.1f}')" 2>/dev/null || echo "?")
    SUMMARY+=("$r  $name (${dt}s)")
    echo "$r  $name (${dt}s)"
}

if [ ! -f "$WH_DIR/pylock.toml" ]; then
    echo "FAIL: no wheelhouse at $WH_DIR (stage it on the networked host first; see the header of $0)"
    exit 1
fi
echo "box python: $($PY -c 'import sys; print(sys.version.split()[0])'); wheelhouse: $WH_DIR"

# 1. capture_target.py runs here, and the box accepts every staged wheel's tags.
step "capture_target.py on the box" "$PY" "$WH_DIR/capture_target.py" -o "$OUT/box-target.json"
check_tags() {
    "$PY" - "$WH_DIR" "$OUT/box-target.json" <<'EOF'
import json, sys, tomllib, pathlib
wh, prof = pathlib.Path(sys.argv[1]), json.load(open(sys.argv[2]))
tags = set(prof["compatible_tags"])
lock = tomllib.loads((wh / "pylock.toml").read_text())
bad = []
for pkg in lock["packages"]:
    for w in pkg["wheels"]:
        stem = w["name"][:-4].split("-")
        py, abi, plat = stem[-3], stem[-2], stem[-1]
        if not any(f"{a}-{b}-{c}" in tags for a in py.split(".") for b in abi.split(".") for c in plat.split(".")):
            bad.append(w["name"])
print("wheels:", sum(len(p["wheels"]) for p in lock["packages"]), "not installable here:", bad)
sys.exit(1 if bad else 0)
EOF
}
step "every staged wheel's tag is accepted by this interpreter" check_tags

# 2. hashes and sizes as pylock.toml records them.
verify_lock() {
    "$PY" - "$WH_DIR" <<'EOF'
import hashlib, sys, tomllib, pathlib
wh = pathlib.Path(sys.argv[1])
bad = 0
for sub in ("", "bootstrap"):
    lock = tomllib.loads((wh / sub / "pylock.toml").read_text())
    for pkg in lock["packages"]:
        for w in pkg["wheels"]:
            p = wh / sub / w["path"]
            data = p.read_bytes()
            ok = hashlib.sha256(data).hexdigest() == w["hashes"]["sha256"] and len(data) == w.get("size", len(data))
            bad += not ok
            print("ok " if ok else "BAD", sub or ".", w["name"])
sys.exit(1 if bad else 0)
EOF
}
step "pylock.toml + bootstrap/pylock.toml hashes verify" verify_lock

# 3. the one bootstrap command, in a fresh venv (ensurepip: no network needed).
make_venv() { "$PY" -m venv "$work/venv" || { "$PY" -m venv --without-pip "$work/venv" && "$PY" -m pip --python "$work/venv/bin/python" --version; }; }
step "fresh venv" make_venv
bootstrap() {  # the line BOOTSTRAP.txt gives, as a user pastes it: its venv is ours, its python3 the box's
    line=$(grep -m1 -F -- "--python ~/wh-venv/bin/python install" "$WH_DIR/bootstrap/BOOTSTRAP.txt" | sed 's/^ *//')
    echo "BOOTSTRAP.txt: $line"
    line=${line//\~\/wh-venv/$work/venv}
    line=${line//python3 /$PY }
    (cd "$WH_DIR" && PIP_NO_INDEX=1 bash -c "$line")
}
step "bootstrap wh offline from bootstrap/" bootstrap
step "wh --version in the bootstrapped venv" "$work/venv/bin/wh" --version

# 4. the stack itself, from wheels/, and the compiled extension imports.
install_stack() {
    if [ -x "$work/venv/bin/pip" ]; then P=("$work/venv/bin/python" -m pip); else P=("$PY" -m pip --python "$work/venv/bin/python"); fi
    "${P[@]}" install -q --no-index --find-links "$WH_DIR/wheels" markupsafe rich &&
    "$work/venv/bin/python" -c "import markupsafe._speedups as s, rich; print('compiled:', s.__file__)"
}
step "install the stack offline + import markupsafe._speedups" install_stack

# 5. the bootstrapped wh re-stages the stack from the carried simple/ index, offline.
restage() {
    WH_CACHE_DIR="$work/cache" "$work/venv/bin/wh" stage markupsafe rich \
        --index-url "file://$WH_DIR/simple" --find-links "$WH_DIR/bootstrap" \
        -o "$work/restaged" --json >"$OUT/stage-restaged.json" &&
    "$PY" - "$WH_DIR" "$work/restaged" <<'EOF'
import sys, tomllib, pathlib
a, b = (tomllib.loads((pathlib.Path(p) / "pylock.toml").read_text()) for p in sys.argv[1:3])
ha = {w["name"]: w["hashes"]["sha256"] for p in a["packages"] for w in p["wheels"]}
hb = {w["name"]: w["hashes"]["sha256"] for p in b["packages"] for w in p["wheels"]}
# The carried wheelhouse may hold more than markupsafe + rich (the lead adds toolchain wheels):
# every re-staged wheel must be one of the carried ones, with the same hash.
same = bool(hb) and all(ha.get(n) == h for n, h in hb.items())
print("same wheels and hashes:", same, len(hb))
boot = sorted(x.name for x in (pathlib.Path(sys.argv[2]) / "bootstrap").glob("*.whl"))
print("bootstrap rebuilt on the box:", boot)
sys.exit(0 if same and any(n.startswith("wh-") for n in boot) else 1)
EOF
}
step "offline re-stage from simple/ (wh's own wheel repacked from RECORD)" restage

cp "$WH_DIR/wh.json" "$OUT/staged-wh.json" 2>/dev/null
{
    echo "stage.sh on $(hostname): $( [ $fail = 0 ] && echo ALL PASS || echo FAILURES )"
    printf '%s\n' "${SUMMARY[@]}"
} | tee "$OUT/stage-summary.txt"
[ $fail = 0 ] || tail -40 "$LOG"
rm -rf "$work"
exit $fail
