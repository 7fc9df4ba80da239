#!/usr/bin/env bash
# wh build / wh patch on the offline H200 box (CPython 3.12 + torch, nvcc 13.0, NVIDIA wheels whose
# nvidia/cu13/lib has only versioned sonames, no network).
#
#   bash tests/device/build.sh [WHEELHOUSE_WITH_BOOTSTRAP]
#
# Proves, with the toy engine of tests/support/packages/toy_engine.py (a real git repo made here; its
# setup.py links a C extension with -lcudart against nvidia/*/lib of the building interpreter):
#   1. the build FAILS without soname links, and wh shows the linker's own "cannot find -lcudart";
#   2. with link-sonames it succeeds against the image's own libcudart.so.13 (through a symlink copy
#      of the image's nvidia/cu13/lib inside a build venv, so the image itself is never changed);
#   3. the wheel installs into a temp venv that sees the image's packages, imports, and
#      cudaRuntimeGetVersion() from the real libcudart answers;
#   4. a re-run reuses the wheel;
#   5. wh patch on the box: already-patched on the built wheel, and a spec conditioned on
#      "sm_89 and torch < 2.12" is skipped here with the reason taken from nvidia-smi and torch.
# Evidence goes to $OUT; a compact summary is printed at the end. Takes well under a minute.
set -u
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-build-device-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/wh-build-dev.XXXX)
REPO=$PWD
declare -a SUMMARY=()
FAIL=0
say() { SUMMARY+=("$*"); echo "== $*" >&2; }
bad() { FAIL=1; say "FAIL $*"; }

command -v git >/dev/null || { echo "FAIL: git is not installed on this box (wh build needs the git CLI)"; exit 1; }
command -v gcc >/dev/null || { echo "FAIL: gcc is not installed on this box"; exit 1; }
IMG_SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
IMG_LIB="$IMG_SITE/nvidia/cu13/lib"
[ -d "$IMG_LIB" ] || { echo "FAIL: $IMG_LIB does not exist"; exit 1; }
say "box: $("$PY" -c 'import sys; print(sys.version.split()[0])'), image lib $IMG_LIB: libcudart.so present? $([ -e "$IMG_LIB/libcudart.so" ] && echo yes || echo no), $(ls "$IMG_LIB" | grep -c '^libcudart.so.') versioned"

# --- wh's own deps: importable already, or from a wheelhouse's bootstrap/, or pip's vendored copies.
DEPS="$WORK/deps"; mkdir -p "$DEPS"
export PYTHONPATH="$REPO:$DEPS${WH_BOX_DEPS:+:$WH_BOX_DEPS}"
if ! "$PY" -c "import packaging.tags, pyproject_hooks" 2>/dev/null; then
  if [ -n "${1:-}" ] && [ -d "$1/bootstrap" ]; then
    "$PY" -m pip install -q --no-index --find-links "$1/bootstrap" --target "$DEPS" packaging pyproject_hooks click rich >"$OUT/deps.log" 2>&1
  fi
  VENDOR=$("$PY" -c "import os, pip; print(os.path.join(os.path.dirname(pip.__file__), '_vendor'))" 2>/dev/null)
  for m in packaging pyproject_hooks; do
    "$PY" -c "import $m" 2>/dev/null || { [ -n "$VENDOR" ] && [ -d "$VENDOR/$m" ] && ln -s "$VENDOR/$m" "$DEPS/$m"; }
  done
fi
"$PY" -c "import wheelhouse.engine, wheelhouse.patch" 2>"$OUT/import.stderr" || { cat "$OUT/import.stderr"; echo "FAIL: wh's modules do not import with $PY"; exit 1; }
if "$PY" -c "import click, rich" 2>/dev/null; then MODE=cli; else MODE=library; fi
MODE=${WH_DRIVE:-$MODE}  # WH_DRIVE=library forces the API path
say "wh driven through: $MODE ($( [ $MODE = cli ] && echo '`python -m wheelhouse build/patch`' || echo 'wheelhouse.engine/patch API; click/rich absent'))"

# Driver: the CLI when it can start, else the same library calls the CLI makes (same messages).
cat >"$WORK/drive.py" <<'EOF'
import json, sys
from pathlib import Path
from wheelhouse.errors import WhError
verb, args = sys.argv[1], sys.argv[2:]
try:
    if verb == "build":
        from wheelhouse.engine import build_engine, load_recipe
        recipe, out, py, cache = args
        r = build_engine(load_recipe(recipe), Path(out), python=py, cache_dir=Path(cache),
                         sink=lambda l: print(l, file=sys.stderr, flush=True))
        print(json.dumps({"wheel": str(r.wheel), "sha256": r.sha256, "reused": r.reused, "links": list(r.links),
                          "log": str(r.log_path), "engine": dict(r.record)}))
    else:
        from wheelhouse import patch
        spec, py = args
        o = {"apply": patch.apply_patch, "verify": patch.verify_patch}[verb](spec, py)
        print(json.dumps(o.to_json()))
        sys.exit(0 if o.ok else 1)
except WhError as e:
    print(f"error: {e.message}", file=sys.stderr)
    if e.detail: print(e.detail, file=sys.stderr)
    if e.hint: print(f"hint: {e.hint}", file=sys.stderr)
    sys.exit(e.exit_code)
EOF
whb() {  # whb RECIPE OUT PY CACHE
  if [ $MODE = cli ]; then "$PY" -m wheelhouse build "$1" -o "$2" --python "$3" --cache-dir "$4" --json
  else "$PY" "$WORK/drive.py" build "$@"; fi
}
whp() {  # whp apply|verify SPEC PY
  if [ $MODE = cli ]; then "$PY" -m wheelhouse patch "$1" "$2" --python "$3" --json
  else "$PY" "$WORK/drive.py" "$@"; fi
}

# --- the toy engine repo and a build venv that sees the image's packages (torch, setuptools) and
#     holds a symlink copy of the image's nvidia/cu13/lib (versioned sonames only, real files).
SHAS=$("$PY" tests/support/packages/toy_engine.py make-repo "$WORK/repo") || { echo "FAIL: could not make the toy repo"; exit 1; }
echo "$SHAS" >"$OUT/toy-repo.json"
sha() { "$PY" -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$SHAS" "$1"; }
"$PY" -m venv --without-pip "$WORK/bv" || { echo "FAIL: venv"; exit 1; }
BPY="$WORK/bv/bin/python"
BSITE=$("$BPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "import site; site.addsitedir('$IMG_SITE')" >"$BSITE/_image.pth"
mkdir -p "$BSITE/nvidia/cu13/lib"
for f in "$IMG_LIB"/*; do ln -s "$f" "$BSITE/nvidia/cu13/lib/$(basename "$f")"; done
for d in "$IMG_SITE"/nvidia/cu13/*; do  # bin/ (nvcc), include/, ...: so wh finds the pinned toolchain here
  [ "$(basename "$d")" = lib ] || [ "$(basename "$d")" = lib64 ] || ln -s "$d" "$BSITE/nvidia/cu13/$(basename "$d")"
done
"$BPY" -c "import setuptools, torch; print('build venv: setuptools', setuptools.__version__, 'torch', torch.__version__)" >&2 \
  || bad "build venv cannot import setuptools/torch from the image"

recipe() {  # recipe FILE LINK_SONAMES
  "$PY" - "$1" "$2" "$SHAS" <<'EOF'
import json, sys
sys.path.insert(0, "tests/support/packages")
import toy_engine as t
s = json.loads(sys.argv[3])
open(sys.argv[1], "w").write(t.recipe_text(s["repo"], s["base"], fetch=[s["pr_ref"]],
    backports=[("toyengine/kernel.py", s["pr_ref"], None, "patches/toy-fix/kernel.py")], link_sonames=sys.argv[2] == "true"))
EOF
}
HOUSE="$WORK/wheelhouse"; CACHE="$WORK/cache"

# 1. without links: the linker's own line
recipe "$WORK/nolinks.toml" false
whb "$WORK/nolinks.toml" "$HOUSE" "$BPY" "$CACHE" >"$OUT/build-nolinks.json" 2>"$OUT/build-nolinks.stderr"; rc=$?
if [ $rc -ne 0 ] && grep -q "cannot find -lcudart" "$OUT/build-nolinks.stderr" && grep -q "full log:" "$OUT/build-nolinks.stderr"; then
  say "PASS 1 no links: rc=$rc, wh printed: $(grep -m1 'cannot find -lcudart' "$OUT/build-nolinks.stderr")"
elif [ $rc -eq 0 ]; then
  say "N/A  1 no links: the build linked anyway (a bare libcudart.so is on this box's default linker path)"
else bad "1 no links: rc=$rc but no 'cannot find -lcudart' line (see build-nolinks.stderr)"; fi

# 2. with link-sonames: builds against the image's libcudart.so.13
recipe "$WORK/links.toml" true
t0=$(date +%s.%N)
whb "$WORK/links.toml" "$HOUSE" "$BPY" "$CACHE" >"$OUT/build.json" 2>"$OUT/build.stderr"; rc=$?
dt=$("$PY" -c "print(f'{$(date +%s.%N)-$t0:.1f}')")
if [ $rc -eq 0 ]; then
  say "PASS 2 build with links: ${dt}s $("$PY" -c "import json; d=json.load(open('$OUT/build.json')); print(d['wheel'].rsplit('/',1)[1], 'links made:', len(d['links']), 'CUDA_HOME', d['engine']['build']['CUDA_HOME'])")"
  cp "$HOUSE/wh.json" "$OUT/wh.json"; cp "$HOUSE/pylock.toml" "$OUT/pylock.toml"; cp "$HOUSE"/logs/*.log "$OUT/" 2>/dev/null
else bad "2 build with links: rc=$rc: $(tail -5 "$OUT/build.stderr")"; fi

# 3. install into a temp venv (--system-site-packages, plus the image's site-packages) and call libcudart
WHEEL=$(ls "$HOUSE"/wheels/*.whl 2>/dev/null | head -1)
if [ -n "$WHEEL" ]; then
  "$PY" -m venv --without-pip --system-site-packages "$WORK/iv"; IPY="$WORK/iv/bin/python"
  ISITE=$("$IPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"); echo "import site; site.addsitedir('$IMG_SITE')" >"$ISITE/_image.pth"
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip --python "$IPY" install -q --no-index --no-deps --disable-pip-version-check "$WHEEL" >"$OUT/pip-install.log" 2>&1; how=pip
  else
    "$PY" -m zipfile -e "$WHEEL" "$ISITE"; how="unzip (no pip in $PY)"
  fi
  got=$(cd "$WORK" && "$IPY" -c "import toyengine._cuda as c, toyengine.kernel as k, torch; print(c.runtime_version(), k.rowwise_ok(), torch.__version__)" 2>"$OUT/import.stderr")
  if [ "$(echo "$got" | cut -d' ' -f2)" = "False" ] && [ "$(echo "$got" | cut -d' ' -f1)" -ge 13000 ] 2>/dev/null; then
    say "PASS 3 install ($how) + import: cudaRuntimeGetVersion=$(echo $got | cut -d' ' -f1), backported kernel.rowwise_ok()=False, torch $(echo $got | cut -d' ' -f3)"
  else bad "3 install/import: got '$got' $(tail -3 "$OUT/import.stderr")"; fi
else bad "3 no wheel to install"; fi

# 4. re-run reuses the wheel
whb "$WORK/links.toml" "$HOUSE" "$BPY" "$CACHE" >"$OUT/build-rerun.json" 2>"$OUT/build-rerun.stderr"; rc=$?
reused=$("$PY" -c "import json; print(json.load(open('$OUT/build-rerun.json'))['reused'])" 2>/dev/null)
[ $rc -eq 0 ] && [ "$reused" = "True" ] && say "PASS 4 re-run reused the wheel" || bad "4 re-run: rc=$rc reused=$reused"

# 5. wh patch on the box
if [ -n "$WHEEL" ]; then
  SPEC="$HOUSE/patches/toy-fix/toy-fix.toml"
  printf '[patch]\nname = "toy-fix"\ndistribution = "toyengine"\nfile = "toyengine/kernel.py"\npayload = "kernel.py"\n\n[patch.verify]\ncall = "toyengine.kernel:rowwise_ok"\nexpect = false\n' >"$SPEC"
  whp apply "$SPEC" "$IPY" >"$OUT/patch-apply.json" 2>"$OUT/patch-apply.stderr"; rc=$?
  st=$("$PY" -c "import json; print(json.load(open('$OUT/patch-apply.json'))['state'])" 2>/dev/null)
  [ $rc -eq 0 ] && [ "$st" = "already-patched" ] && say "PASS 5a patch apply on the built wheel: already-patched (hashes from wh.json)" || bad "5a patch apply: rc=$rc state=$st"
  SPEC2="$HOUSE/patches/toy-fix/sm89.toml"
  printf '[patch]\nname = "toy-sm89"\ndistribution = "toyengine"\nfile = "toyengine/kernel.py"\npayload = "kernel.py"\n\n[patch.when]\nsm = ["8.9"]\ntorch = "<2.12"\n' >"$SPEC2"
  whp apply "$SPEC2" "$IPY" >"$OUT/patch-sm89.json" 2>"$OUT/patch-sm89.stderr"; rc=$?
  why=$("$PY" -c "import json; d=json.load(open('$OUT/patch-sm89.json')); print(d['state'], '-', d['reason'])" 2>/dev/null)
  [ $rc -eq 0 ] && say "PASS 5b sm_89/torch<2.12 spec here: $why" || bad "5b sm89 spec: rc=$rc $why"
fi

# wh build links every NVIDIA folder the build interpreter imports from (the image's too, through
# _image.pth) and records them in the build venv: undo gives the image back.
"$PY" -m wheelhouse links --undo --python "$BPY" >"$OUT/links-undo.txt" 2>&1 || "$BPY" -c "
import sys, sysconfig; sys.path.insert(0, '.'); from pathlib import Path
from wheelhouse.env.links import undo_links, record_path
undo_links(record_path(Path(sysconfig.get_paths()['platlib'])), [Path(p) for p in sys.path[1:] if p])" >>"$OUT/links-undo.txt" 2>&1
[ -e "$IMG_LIB/libcudart.so" ] && bad "the image's $IMG_LIB gained libcudart.so (it must stay untouched)" || say "image untouched: no libcudart.so in $IMG_LIB"
printf '%s\n' "${SUMMARY[@]}" >"$OUT/summary.txt"
echo; echo "==== wh build/patch on the box: $([ $FAIL -eq 0 ] && echo PASS || echo FAIL)"; printf '  %s\n' "${SUMMARY[@]}"
rm -rf "$WORK"
exit $FAIL
