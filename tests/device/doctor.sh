#!/usr/bin/env bash
# wh doctor on the offline H200 box (CPython 3.12 + torch 2.11+cu130, Triton, NVIDIA wheels whose
# nvidia/cu13/lib has only versioned sonames, no network).
#
#   bash tests/device/doctor.sh
#
# Proves:
#   1. a full `wh doctor --python $PY --json --junit` against the image's interpreter: every native
#      distribution import-probed, the Triton probe compiles AND launches a kernel, gpu facts, torch's
#      CUDA vs the driver, the nvcc compile probe runs its kernel on the GPU;
#   2. links:sonames reports that nvidia/cu13/lib lacks its unversioned names;
#   3. `--fix` adds them -- on a symlink copy of the image's nvidia/cu13/lib inside a venv, so the
#      image itself (which other device scripts rely on) is never changed -- and a re-check is ok;
#   4. what the stub check says about every libcuda on the box (the toolkit's compat/ libcuda and
#      the stubs/ one), by running the libcuda probe with each folder put first on LD_LIBRARY_PATH.
# Evidence (JSON, JUnit) goes to $OUT; a compact summary is printed at the end. Well under 3 minutes.
set -u
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-doctor-device-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/wh-doctor-dev.XXXX)
REPO=$PWD
declare -a SUMMARY=()
FAIL=0
say() { SUMMARY+=("$*"); echo "== $*" >&2; }
bad() { FAIL=1; say "FAIL $*"; }

IMG_SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
IMG_LIB="$IMG_SITE/nvidia/cu13/lib"

# --- wh's own deps: importable already, or pip's vendored copies (packaging, rich). -----------------
DEPS="$WORK/deps"; mkdir -p "$DEPS"
export PYTHONPATH="$REPO:$DEPS${WH_BOX_DEPS:+:$WH_BOX_DEPS}"
VENDOR=$("$PY" -c "import os, pip; print(os.path.join(os.path.dirname(pip.__file__), '_vendor'))" 2>/dev/null)
for m in packaging rich pygments; do
  "$PY" -c "import $m" 2>/dev/null || { [ -n "$VENDOR" ] && [ -d "$VENDOR/$m" ] && ln -s "$VENDOR/$m" "$DEPS/$m"; }
done
"$PY" -c "import wheelhouse.doctor" 2>"$OUT/import.stderr" || { cat "$OUT/import.stderr"; echo "FAIL: wheelhouse.doctor does not import with $PY"; exit 1; }
if "$PY" -c "import click, rich" 2>/dev/null; then MODE=cli; else MODE=library; fi
say "wh driven through: $MODE"

# The same calls the CLI makes, for a box without click (JSON to stdout, exit code as documented).
cat >"$WORK/drive.py" <<'EOF'
import json, sys
from pathlib import Path
from wheelhouse.errors import WhError
from wheelhouse.doctor import run_doctor
from wheelhouse.doctor.report import DoctorReport, render_junit
args = sys.argv[1:]
def opt(name, default=None):
    return args[args.index(name) + 1] if name in args else default
checks = [args[i + 1] for i, a in enumerate(args) if a == "--check"]
try:
    kw = dict(checks=checks or None, timeout=float(opt("--timeout", 60)))
    report = run_doctor(opt("--python"), **kw)
    if "--fix" in args:
        from wheelhouse.doctor import apply_fixes
        fixes = apply_fixes(report, opt("--python"))
        report = run_doctor(opt("--python"), **kw)
        report = DoctorReport(report.python, report.results, report.facts, report.started, report.seconds, tuple(fixes))
    if opt("--junit"):
        Path(opt("--junit")).write_text(render_junit(report))
    print(json.dumps(report.to_json(), indent=2))
    for r in report.results:
        print(f"{r.verdict:5} {r.id}: {(r.evidence.splitlines() or [''])[0][:200]}", file=sys.stderr)
    sys.exit(report.exit_code())
except WhError as e:
    print(f"error: {e.message}", file=sys.stderr)
    if e.hint: print(f"hint: {e.hint}", file=sys.stderr)
    sys.exit(e.exit_code)
EOF
whd() {
  if [ $MODE = cli ]; then COLUMNS=200 "$PY" -m wheelhouse doctor "$@"; else "$PY" "$WORK/drive.py" "$@"; fi
}

# Pull fields out of a report: verdict and first evidence line of one check id.
field() {  # field FILE ID
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
for r in rep.get("results", []):
    if r["id"] == sys.argv[2]:
        print(r["verdict"] + ": " + " | ".join(r["evidence"].splitlines()[:3])[:400]); break
else:
    print("absent")
EOF
}

# --- 1. the full doctor against the image's interpreter ----------------------------------------------
T0=$(date +%s)
whd --python "$PY" --json --junit "$OUT/doctor.junit.xml" --timeout 90 >"$OUT/doctor.json" 2>"$OUT/doctor.stderr"
RC=$?
T1=$(date +%s)
say "full doctor: exit $RC in $((T1 - T0))s ($(tail -1 "$OUT/doctor.stderr"))"
[ -s "$OUT/doctor.json" ] || { bad "no JSON from the doctor"; tail -30 "$OUT/doctor.stderr"; }
if [ -s "$OUT/doctor.json" ]; then
  "$PY" - "$OUT/doctor.json" >"$OUT/doctor.summary.txt" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
print("counts:", rep["counts"], "schema_version:", rep["schema_version"])
f = rep["facts"]
print("distributions:", f["distributions"], "native:", f["native_distributions"])
for r in rep["results"]:
    if r["verdict"] in ("fail", "error", "warn") or r["group"] in ("gpu", "toolchain", "jit", "links"):
        print(f'{r["verdict"]:5} {r["id"]}: {" | ".join(r["evidence"].splitlines()[:2])[:300]}')
EOF
  cat "$OUT/doctor.summary.txt" >&2
  for id in gpu:devices gpu:driver-cuda gpu:interconnect jit:triton toolchain:versions toolchain:nvcc toolchain:compile links:sonames links:libcuda links:stubs; do
    say "$id -> $(field "$OUT/doctor.json" "$id")"
  done
  case "$(field "$OUT/doctor.json" jit:triton)" in ok:*) ;; *) bad "jit:triton did not compile+launch a kernel";; esac
  case "$(field "$OUT/doctor.json" links:sonames)" in *cu13/lib\ lacks*) ;; *) bad "links:sonames did not report nvidia/cu13/lib";; esac
  case "$(field "$OUT/doctor.json" gpu:devices)" in ok:*) ;; *) bad "gpu:devices is not ok";; esac
  NFAIL=$("$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join(x['id'] for x in r['results'] if x['verdict'] in ('fail','error')))" "$OUT/doctor.json")
  say "failing checks on the image: ${NFAIL:-none}"
fi

# --- 2/3. --fix on a symlink copy of nvidia/cu13/lib (the image stays untouched) ---------------------
VENV="$WORK/venv"
"$PY" -m venv --system-site-packages --without-pip "$VENV" >/dev/null 2>&1 || bad "cannot create a venv"
VSITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
if [ -d "$IMG_LIB" ]; then
  mkdir -p "$VSITE/nvidia/cu13" && cp -rs "$IMG_LIB" "$VSITE/nvidia/cu13/lib"
  whd --python "$VENV/bin/python" --check links:sonames --json >"$OUT/links-before.json" 2>/dev/null
  say "venv copy before --fix: $(field "$OUT/links-before.json" links:sonames | cut -c1-220)"
  whd --python "$VENV/bin/python" --check links:sonames --fix --json >"$OUT/links-fix.json" 2>"$OUT/links-fix.stderr"
  RCF=$?
  say "after --fix (exit $RCF): $(field "$OUT/links-fix.json" links:sonames | cut -c1-200); made: $("$PY" -c "import json,sys; print(len(json.load(open(sys.argv[1]))['fixes']))" "$OUT/links-fix.json" 2>/dev/null) link(s); libcudart.so -> $(readlink "$VSITE/nvidia/cu13/lib/libcudart.so" || echo MISSING)"
  [ -L "$VSITE/nvidia/cu13/lib/libcudart.so" ] || bad "--fix did not add libcudart.so"
  [ -e "$IMG_LIB/libcudart.so" ] && say "note: the image itself has libcudart.so (someone added it before this run)"
else
  bad "$IMG_LIB does not exist"
fi

# --- 4. every libcuda on the box, through the libcuda probe (what dlopen really gives) ---------------
find / -xdev \( -path /proc -o -path /sys \) -prune -o -name 'libcuda.so*' -print 2>/dev/null | sort >"$OUT/libcuda-files.txt"
say "libcuda files on the box: $(wc -l <"$OUT/libcuda-files.txt") ($(tr '\n' ' ' <"$OUT/libcuda-files.txt" | cut -c1-400))"
"$PY" "$REPO/doctor/probes/libcuda.py" >"$OUT/libcuda-default.txt" 2>&1
say "default loader: $(grep -o '"loaded": {[^}]*}' "$OUT/libcuda-default.txt" | cut -c1-300)"
for d in $(xargs -r -n1 dirname <"$OUT/libcuda-files.txt" | sort -u | grep -E 'compat|stubs'); do
  tag=$(echo "$d" | tr '/' '_')
  LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" whd --python "$PY" --check links:libcuda --check links:ld-library-path --json >"$OUT/libcuda$tag.json" 2>/dev/null
  say "with $d first on LD_LIBRARY_PATH: libcuda -> $(field "$OUT/libcuda$tag.json" links:libcuda | cut -c1-300); ld-library-path -> $(field "$OUT/libcuda$tag.json" links:ld-library-path | cut -c1-120)"
done

rm -rf "$WORK"
echo
echo "==================== wh doctor on the device: summary ===================="
printf '%s\n' "${SUMMARY[@]}"
echo "evidence in \$OUT: $(ls "$OUT" | tr '\n' ' ')"
[ $FAIL = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
exit $FAIL
