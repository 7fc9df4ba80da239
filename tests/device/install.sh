#!/usr/bin/env bash
# wh install / links / env on the offline H200 box.
#
#   bash tests/device/install.sh [WHEELHOUSE]
#
# WHEELHOUSE: staged on the networked host for the box's CPython 3.12 / glibc 2.39
# (e.g. `wh stage manifests/demo.toml --target manifests/<box profile>.json -o wh-box`).
# Without it, a small wheelhouse is made here from tests/support/wheelmaker.py (host-target).
# Evidence (JSON) goes to $OUT; a compact summary is printed at the end.
set -u
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-device-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/wh-install-dev.XXXX)
REPO=$PWD
declare -a SUMMARY
say() { SUMMARY+=("$*"); echo "== $*" >&2; }

# --- wh itself on the box: the repo on PYTHONPATH; its dependencies from the wheelhouse's bootstrap/
# (unpacked with wh's own stdlib-only unpacker, so neither pip nor a network is needed), else the image's.
export PYTHONPATH="$REPO${WH_BOX_DEPS:+:$WH_BOX_DEPS}"
if [ -n "${1:-}" ] && ls "$1"/bootstrap/*.whl >/dev/null 2>&1; then
  "$PY" - "$1/bootstrap" "$WORK/deps" <<'EOF' >"$OUT/bootstrap.log" 2>&1
import sys
from pathlib import Path
from wheelhouse.install.wheel import install_wheels
src, dest = Path(sys.argv[1]), Path(sys.argv[2])
wheels = [w for w in sorted(src.glob("*.whl")) if not w.name.startswith("wh-")]
scheme = {"purelib": str(dest), "platlib": str(dest), "scripts": str(dest / "bin"), "data": str(dest / "data"),
          "headers": str(dest / "include")}
done = install_wheels(wheels, scheme, sys.executable)
print("bootstrap deps:", ", ".join(f"{d.name} {d.version}" for d in done))
EOF
  export PYTHONPATH="$REPO:$WORK/deps${WH_BOX_DEPS:+:$WH_BOX_DEPS}"
fi
WH=("$PY" -m wheelhouse)
"${WH[@]}" --version >&2 || { echo "wh does not start with $PY (missing click/rich/packaging?)"; exit 1; }

# --- the wheelhouse
HOUSE=${1:-}
if [ -z "$HOUSE" ]; then
  HOUSE="$WORK/house"
  "$PY" - "$HOUSE" <<'EOF' || exit 1
import hashlib, sys
sys.path.insert(0, "tests/support")
from pathlib import Path
from wheelmaker import make_wheel
from wheelhouse.lock import Lock, LockedFile, write_pylock, write_wh_json
from wheelhouse.target import host_target
house = Path(sys.argv[1]); w = house / "wheels"
made = [make_wheel(w, "whdemo", "1.0", modules={"whdemo/__init__.py": "def main():\n    print('whdemo ok')\n"},
                   entry_points={"console_scripts": {"whdemo": "whdemo:main"}}),
        make_wheel(w, "whpad", "1.0", pad_bytes=20 << 20)]
files = [LockedFile(name=p.name.split("-")[0], version="1.0", filename=p.name, path=f"wheels/{p.name}",
                    sha256=hashlib.sha256(p.read_bytes()).hexdigest(), size=p.stat().st_size) for p in made]
write_pylock(house, Lock(files=tuple(files)))
write_wh_json(house, {"target": host_target().to_json(), "patches": []})
EOF
  say "wheelhouse: none given; made a 2-wheel host wheelhouse"
else
  say "wheelhouse: $HOUSE ($(ls "$HOUSE"/wheels 2>/dev/null | wc -l) wheels, $(du -sh "$HOUSE/wheels" 2>/dev/null | cut -f1))"
fi

# --- 0. the image as it comes: its nvidia/cu13/lib has only versioned sonames
"${WH[@]}" links --check --python "$PY" --json >"$OUT/links-check-image-before.json" 2>/dev/null
say "links --check on the image before install: rc=$? $("$PY" -c "
import json; d=json.load(open('$OUT/links-check-image-before.json')); print(len(d['changes']), 'changes needed')" 2>/dev/null)"

# --- 1. install into a new venv that sees the image's torch
rm -rf /tmp/v
t0=$(date +%s.%N)
"${WH[@]}" install "$HOUSE" --venv /tmp/v --system-site-packages --python "$PY" --json >"$OUT/install.json" 2>"$OUT/install.stderr"
rc=$?; t1=$(date +%s.%N)
say "install: rc=$rc $(python3 -c "print(f'{$t1-$t0:.1f}s')" 2>/dev/null) installed=$("$PY" -c "import json;d=json.load(open('$OUT/install.json'));print(len(d['installed']), 'links', len(d['links']))" 2>/dev/null)"
[ $rc -ne 0 ] && tail -5 "$OUT/install.stderr" >&2
t0=$(date +%s.%N)
"${WH[@]}" install "$HOUSE" --venv /tmp/v --json >"$OUT/install-again.json" 2>>"$OUT/install.stderr"
rc2=$?; t1=$(date +%s.%N)
say "re-install (idempotent): rc=$rc2 $("$PY" -c "import json;d=json.load(open('$OUT/install-again.json'));print('installed', len(d['installed']), 'skipped', len(d['skipped']), 'in', d['seconds'], 's')" 2>/dev/null)"
/tmp/v/bin/python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" >"$OUT/torch-from-venv.txt" 2>&1
say "torch from the venv (system site): $(tail -1 "$OUT/torch-from-venv.txt")"

# --- 2. links --check against the image's own nvidia/cu13/lib: wh install linked it (the venv loads the
#        parent venv's libraries), so nothing is left to change
"${WH[@]}" links --check --python "$PY" --json >"$OUT/links-check-image.json" 2>"$OUT/links-check-image.stderr"
rc=$?
say "links --check (image $PY): rc=$rc (1 = changes needed) $("$PY" -c "
import json; d=json.load(open('$OUT/links-check-image.json')); c=d['changes']
names=sorted({c['path'].rsplit('/',1)[1] for c in c if c['action']=='symlink'})
print(len(d['lib_dirs']), 'lib dirs;', len(c), 'changes; e.g.', ', '.join(names[:6]))" 2>/dev/null)"

# --- 3. fix + gcc -lcudart + undo on a symlink copy of the image's nvidia tree (the image stays untouched)
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
if [ -d "$SITE/nvidia" ] && command -v gcc >/dev/null; then
  mkdir -p "$WORK/site" && cp -rs "$SITE/nvidia" "$WORK/site/nvidia"
  LIB=$(dirname "$(find "$WORK/site/nvidia" -name 'libcudart.so.*' | head -1)")
  printf 'int cudaRuntimeGetVersion(int*);\nint main(void){int v=0;cudaRuntimeGetVersion(&v);return v>0?0:1;}\n' >"$WORK/m.c"
  before=$(cd "$WORK/site" && find . -printf '%p %l\n' | sort | sha256sum)
  gcc "$WORK/m.c" -L"$LIB" -lcudart -o "$WORK/m" 2>/dev/null && pre=links || pre=fails
  "${WH[@]}" links --fix --path "$WORK/site" --json >"$OUT/links-fix-copy.json" 2>/dev/null
  gcc "$WORK/m.c" -L"$LIB" -lcudart -o "$WORK/m" 2>"$OUT/gcc-after.txt" && post=links || post=fails
  run=$(LD_LIBRARY_PATH="$LIB" "$WORK/m" && echo runs || echo "does-not-run")
  "${WH[@]}" links --undo --path "$WORK/site" >/dev/null 2>&1
  after=$(cd "$WORK/site" && find . -printf '%p %l\n' | sort | sha256sum)
  [ "$before" = "$after" ] && undo=exact || undo=DIFFERS
  say "links on a copy of the image tree: -lcudart before=$pre after=$post binary=$run; undo=$undo"
else
  say "links copy test: skipped (no $SITE/nvidia or no gcc)"
fi

# --- 4. wh env
LD_LIBRARY_PATH=/keep/me "${WH[@]}" env --json --python /tmp/v/bin/python >"$OUT/env-venv.json" 2>/dev/null
LD_LIBRARY_PATH=/keep/me "${WH[@]}" env --json --python "$PY" >"$OUT/env-image.json" 2>/dev/null
say "env (image): $("$PY" -c "
import json; d=json.load(open('$OUT/env-image.json')); ld=d['env']['LD_LIBRARY_PATH'].split(':')
print('LD first =', ld[0], '| nvcc =', d['nvcc'], '| CUDA_HOME =', d['cuda_home'], '| lib dirs', len(d['lib_dirs']))" 2>/dev/null)"
if [ -f /tmp/v/bin/wh-env.sh ]; then
  got=$(bash -c 'export LD_LIBRARY_PATH=/keep/me; . /tmp/v/bin/activate; echo "${LD_LIBRARY_PATH%%:*}"')
  say "venv activate hook: LD_LIBRARY_PATH starts with $got"
fi

# --- 5. give the image back: undo exactly what wh install linked there
"${WH[@]}" links --undo --python /tmp/v/bin/python --json >"$OUT/links-undo.json" 2>/dev/null
"${WH[@]}" links --check --python "$PY" --json >"$OUT/links-check-image-after-undo.json" 2>/dev/null
say "links --undo via the venv: rc=$? on the image afterwards: $("$PY" -c "
import json; d=json.load(open('$OUT/links-check-image-after-undo.json')); print(len(d['changes']), 'changes needed again (image restored)')" 2>/dev/null)"

printf '%s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
rm -rf "$WORK"
