#!/usr/bin/env bash
# Everything wh proves on the offline GPU box, in one call (device time is scarce).
#
# On the networked host, stage for the box's captured profile (CPython 3.12.3, glibc 2.39):
#   .venv/bin/wh stage manifests/demo.toml nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 --full \
#       --target manifests/targets/h200-offline.json -o .device/box-wh
# then on the box (repo root as cwd, .device/box-wh carried along):
#   bash tests/device/all.sh .device/box-wh
# (AREAS="install doctor" FREETOKEN=0 for a shorter proof when device time is short)
# (carry .device/box-wh and, for the FreeToken part, a bare mirror: git clone --mirror FREETOKEN .device/freetoken.git)
#
# Part 0 is the user's card exactly: wh installed from the wheelhouse's bootstrap/ (no repo on
# PYTHONPATH, no network), `wh install` into a venv that keeps the image's torch, `wh links`,
# `wh env`, `wh doctor`. Then each area's own script (tests/device/<area>.sh) runs with a time cap.
# Evidence: $OUT/summary.txt and $OUT/evidence.tgz.
set -u
WH_DIR=$(realpath "${1:-.device/box-wh}")
PY=${PY:-/opt/torch/.venv/bin/python3}
FINAL=${OUT:-/tmp/wh-all-out}
ROOT=/tmp/wh-device
rm -rf "$ROOT" /tmp/whv /tmp/serve; mkdir -p "$ROOT/card" "$FINAL"
SUMMARY="$FINAL/summary.txt"; : >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

say "## card: bootstrap wh offline, install, links, env, doctor"
C=$ROOT/card
{
  set -x
  "$PY" -m venv --without-pip /tmp/whv
  # what the stage printed: 'wh[fast]' where bootstrap/ carries the fast extra (zlib-ng, ISA-L), else wh
  SPEC=$("$PY" -c "import json,sys; e=json.load(open(sys.argv[1]))['bootstrap'].get('extras') or []; print('wh[%s]' % ','.join(e) if e else 'wh')" "$WH_DIR/wh.json")
  (cd "$WH_DIR" && "$PY" -m pip --python /tmp/whv/bin/python install -q --no-index --find-links bootstrap/ "$SPEC")
  /tmp/whv/bin/wh --version
  /tmp/whv/bin/python -c "from wheelhouse.inflate import choose; print('inflater', choose().name)"
  time /tmp/whv/bin/wh install "$WH_DIR" --venv /tmp/serve --system-site-packages --python "$PY" --json >"$C/install.json"
  echo "install rc=$?"
  /tmp/whv/bin/wh install "$WH_DIR" --venv /tmp/serve --system-site-packages --python "$PY" --json >"$C/install-again.json"
  echo "re-install rc=$?"
  /tmp/serve/bin/python -c "import torch, markupsafe._speedups, rich; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  /tmp/whv/bin/wh links --check --python "$PY" --json >"$C/links-image.json"; echo "links --check image rc=$?"
  /tmp/whv/bin/wh links --check --python /tmp/serve/bin/python --json >"$C/links-venv.json"; echo "links --check venv rc=$?"
  LD_LIBRARY_PATH=/keep/me /tmp/whv/bin/wh env --json --python /tmp/serve/bin/python >"$C/env.json"; echo "env rc=$?"
  IMG_LIB=$("$PY" -c "import site; print(site.getsitepackages()[0])")/nvidia/cu13/lib
  ls -l "$IMG_LIB/libcudart.so" && echo "image lib linked by wh install: yes"
  time /tmp/whv/bin/wh doctor --python /tmp/serve/bin/python --json --junit "$C/doctor.junit.xml" >"$C/doctor.json"; echo "doctor rc=$?"
  # Give the image back as it was (the area scripts below expect its unlinked nvidia/cu13/lib):
  /tmp/whv/bin/wh links --undo --python /tmp/serve/bin/python --json >"$C/links-undo.json"; echo "links --undo rc=$?"
  [ ! -e "$IMG_LIB/libcudart.so" ] && echo "image lib after undo: restored"
  set +x
} >"$C/card.log" 2>&1
grep -E "rc=|^torch|^wh |real|image lib" "$C/card.log" | tee -a "$SUMMARY"
"$PY" - "$C" <<'PYEOF' | tee -a "$SUMMARY"
import json, sys, pathlib
c = pathlib.Path(sys.argv[1])
def load(n):
    try: return json.loads((c / n).read_text())
    except Exception as e: return {"_error": repr(e)}
inst = load("install.json"); again = load("install-again.json")
print("install:", {k: (len(v) if isinstance(v, list) else v) for k, v in inst.items() if k in ("installed", "skipped", "links", "patches", "seconds")})
print("install links made:", sorted({x.get("path", "").rsplit("/", 2)[-2] + "/" + x.get("path", "").rsplit("/", 1)[-1] for x in inst.get("links", [])})[:6])
print("re-install:", {k: (len(v) if isinstance(v, list) else v) for k, v in again.items() if k in ("installed", "skipped")})
for n in ("links-image.json", "links-venv.json"):
    d = load(n); ch = d.get("changes", d if isinstance(d, list) else [])
    print(n, "would change:", len(ch), [x.get("path", "").rsplit("/", 1)[-1] for x in ch][:8])
env = load("env.json"); e = env.get("env", env)
print("env LD_LIBRARY_PATH:", str(e.get("LD_LIBRARY_PATH"))[:160]); print("env CUDA_HOME:", e.get("CUDA_HOME"), "PATH[0]:", str(e.get("PATH", "")).split(":")[0])
doc = load("doctor.json"); res = doc.get("results", [])
from collections import Counter
print("doctor summary:", doc.get("summary") or Counter(r.get("verdict") for r in res))
for r in res:
    if r.get("verdict") in ("fail", "error", "warn") or r.get("id", "").startswith(("jit", "gpu", "links", "toolchain")):
        print(f"  {r.get('verdict'):5} {r.get('id')}: {str(r.get('evidence'))[:150]}")
PYEOF

# The area scripts drive wh from this checkout; its dependencies (pyelftools, certifi, ... that the
# image lacks) come from the bootstrapped wh's environment.
export WH_BOX_DEPS=$(/tmp/whv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" 2>/dev/null)
for area in ${AREAS:-install doctor build stage serve resolution}; do  # AREAS="install doctor": a shorter proof
  say "## $area"
  mkdir -p "$ROOT/$area"
  arg=""; case $area in install|build) arg="$WH_DIR";; esac
  start=$(date +%s)
  OUT="$ROOT/$area" WH_DIR="$WH_DIR" PY="$PY" timeout 170 bash "tests/device/$area.sh" $arg >"$ROOT/$area/run.log" 2>&1
  rc=$?
  say "rc=$rc in $(( $(date +%s) - start ))s"
  tail -n 25 "$ROOT/$area/run.log" >>"$SUMMARY"
done
# FreeToken from source (issue 10's proof): needs the carried bare mirror .device/freetoken.git.
if [ -d .device/freetoken.git ] && [ "${FREETOKEN:-1}" = 1 ]; then
  say "## freetoken"
  mkdir -p "$ROOT/freetoken"; start=$(date +%s)
  OUT="$ROOT/freetoken" WH=/tmp/whv/bin/wh PY="$PY" timeout 400 bash tests/device/freetoken.sh .device/freetoken.git "$WH_DIR" \
    >"$ROOT/freetoken/run.log" 2>&1
  say "rc=$? in $(( $(date +%s) - start ))s"
  tail -n 30 "$ROOT/freetoken/run.log" >>"$SUMMARY"
fi
tar czf "$FINAL/evidence.tgz" -C "$ROOT" . 2>/dev/null
echo "done"
