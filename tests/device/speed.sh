#!/usr/bin/env bash
# Install speed on the offline H200 box: wh (bootstrapped by the printed 'wh[fast]' line: zlib-ng), wh with the
# standard zlib, and uv, each into fresh venvs, alternating, on a torch-sized wheelhouse made ON the box: the
# image's own distributions repacked into wheels (nothing that large can be carried), staged offline from there.
#
# On the networked host (a small wheelhouse: uv itself, and a bootstrap/ that carries wh[fast] for cp312):
#   echo "uv==$(.venv/bin/uv --version | cut -d' ' -f2)" > /tmp/uv.txt
#   .venv/bin/wh stage -r /tmp/uv.txt --python-version 3.12 --platform manylinux_2_35_x86_64 -o .device/speed-wh
# then on the box (repo root as cwd, .device/speed-wh carried):
#   ROUNDS=3 bash tests/device/speed.sh .device/speed-wh
# Every run goes to $OUT/speed.txt, the medians to $OUT/summary.txt. Exit 1 when a step failed.
# BYTECODE=1 (default): each set also gets `wh bytecode` (made here by the box's own CPython 3.12, standing in for
# a staging host that has one), and "wh-precompiled" (`wh install --compile`, writing those .pyc files) is timed
# beside "wh-compile" (`--compile --recompile`: compiled on the box) and uv's --compile-bytecode.
set -u
WH_DIR=$(realpath "${1:-.device/speed-wh}")
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-speed-out}
ROUNDS=${ROUNDS:-3}
SETS=${SETS:-"gpu many"}
BYTECODE=${BYTECODE:-1}
# gpu: the CUDA libraries of the 2 GB set (cuDNN, cuBLAS, NCCL, cuSPARSE, ...), triton, numpy: few, huge members.
# many: a serving stack's Python side (transformers, scipy, pandas, pyarrow, sympy ...): thousands of small files.
# (torch itself cannot be staged from the image: the image pins setuptools 84, which torch 2.11 refuses.)
ROOTS_gpu=${ROOTS_gpu:-"nvidia-cudnn-cu13 nvidia-cublas nvidia-nccl-cu13 nvidia-cusparse nvidia-cufft nvidia-cusolver triton numpy"}
ROOTS_many=${ROOTS_many:-"transformers scipy pandas pyarrow sympy networkx jinja2 pillow scikit-learn matplotlib"}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/wh-speed.XXXX)
FAIL=0
say() { echo "== $*" | tee -a "$OUT/summary.txt" >&2; }

# 1. wh, by the very line the stage printed (it asks for 'wh[fast]' where the target has those wheels)
CMD=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['bootstrap']['command'])" "$WH_DIR/wh.json")
say "bootstrap command: $CMD"
mkdir -p "$WORK/home" "$WORK/bin"
ln -s "$PY" "$WORK/bin/python3"
( cd "$WH_DIR" && HOME="$WORK/home" PATH="$WORK/bin:/usr/bin:/bin" PIP_NO_INDEX=1 sh -c "$CMD" ) >"$OUT/bootstrap.log" 2>&1 \
  || { FAIL=1; say "FAIL bootstrap: $(tail -3 "$OUT/bootstrap.log")"; }
WHPY="$WORK/home/wh-venv/bin/python"
WH="$WORK/home/wh-venv/bin/wh"
say "wh $("$WH" --version 2>&1); inflater: $("$WHPY" -c 'from wheelhouse.inflate import choose; print(choose().name)' 2>&1)"
"$WH" install "$WH_DIR" --venv "$WORK/tools" --python "$PY" -q >"$OUT/tools.log" 2>&1 || { FAIL=1; say "FAIL uv install: $(tail -2 "$OUT/tools.log")"; }
UV="$WORK/tools/bin/uv"
say "$("$UV" --version 2>&1); cores: $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg); /tmp: $(df -T /tmp | tail -1 | awk '{print $2}')"

# 2. per set: the image's closure of its roots repacked into wheels (one process per distribution), staged offline
#    from that folder; then alternating rounds, a fresh venv each (made outside the timing), sync before each timing
mkdir -p "$WORK/simple"
echo '<!DOCTYPE html><html><body></body></html>' > "$WORK/simple/index.html"
SITE=$("$WHPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
repack() {  # folder, reqs file, roots...
  PYTHONPATH="$SITE" "$PY" - "$@" <<'PYEOF'
import importlib.metadata as md, sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from wheelhouse.stage.bootstrap import repack_installed

out, reqs, roots = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
seen, todo = {}, [canonicalize_name(r) for r in roots]
while todo:
    name = todo.pop()
    if name in seen:
        continue
    try:
        seen[name] = md.distribution(name).version
    except md.PackageNotFoundError:
        continue
    for line in md.requires(name) or ():
        r = Requirement(line)
        if r.marker is None or r.marker.evaluate({"extra": ""}):
            todo.append(canonicalize_name(r.name))
with ProcessPoolExecutor() as pool:
    wheels = list(pool.map(repack_installed, seen, [out] * len(seen)))
reqs.write_text("".join(f"{n}=={v}\n" for n, v in sorted(seen.items())))
print(len(wheels), "wheels", sum(w.stat().st_size for w in wheels) >> 20, "MiB")
PYEOF
}
run() {  # set, label, command...
  local set=$1 label=$2; shift 2
  rm -rf "$WORK/v" "$WORK/uvcache"; "$PY" -m venv --without-pip "$WORK/v"; sync
  local t0 t1; t0=$(date +%s%N)
  if "$@" >"$OUT/last.log" 2>&1; then
    t1=$(date +%s%N)
    echo "$set $label $(( (t1 - t0) / 1000000 ))" >> "$OUT/speed.txt"
  else
    FAIL=1; say "FAIL $set $label: $(tail -2 "$OUT/last.log")"
  fi
}
for set in $SETS; do
  roots_var="ROOTS_$set"
  mkdir -p "$WORK/big-$set"
  t0=$(date +%s)
  repack "$WORK/big-$set" "$WORK/reqs-$set.txt" ${!roots_var} >"$OUT/repack-$set.log" 2>&1 \
    || { FAIL=1; say "FAIL repack $set: $(tail -3 "$OUT/repack-$set.log")"; continue; }
  say "$set: repacked in $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/repack-$set.log")"
  H="$WORK/wh-$set"
  "$WH" stage -r "$WORK/reqs-$set.txt" -f "$WORK/big-$set" -i "file://$WORK/simple/" --python-version 3.12 \
    --platform manylinux_2_35_x86_64 --no-bootstrap -o "$H" --cache-dir "$WORK/cache" >"$OUT/stage-$set.log" 2>&1 \
    || { FAIL=1; say "FAIL stage $set: $(tail -3 "$OUT/stage-$set.log")"; continue; }
  rm -rf "$WORK/cache" "$WORK/big-$set"
  say "$set: $(ls "$H/wheels" | wc -l) wheels, $(du -sm "$H/wheels" | cut -f1) MiB"
  if [ "$BYTECODE" = 1 ]; then
    t0=$(date +%s%N)
    "$WH" bytecode "$H" >"$OUT/bytecode-$set.log" 2>&1 || { FAIL=1; say "FAIL bytecode $set: $(tail -3 "$OUT/bytecode-$set.log")"; }
    say "$set: wh bytecode in $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(tail -1 "$OUT/bytecode-$set.log")"
  fi
  for r in $(seq 1 "$ROUNDS"); do
    run "$set" "wh" "$WH" -q install "$H" --venv "$WORK/v" --no-links
    run "$set" "uv" env UV_CACHE_DIR="$WORK/uvcache" "$UV" pip install -q --python "$WORK/v/bin/python" --no-index --no-deps "$H"/wheels/*.whl
    run "$set" "wh-zlib" env WH_INFLATE=zlib "$WH" -q install "$H" --venv "$WORK/v" --no-links
    run "$set" "wh-compile" "$WH" -q install "$H" --venv "$WORK/v" --no-links --compile --recompile
    [ "$BYTECODE" = 1 ] && run "$set" "wh-precompiled" "$WH" -q install "$H" --venv "$WORK/v" --no-links --compile
    run "$set" "uv-compile" env UV_CACHE_DIR="$WORK/uvcache" "$UV" pip install -q --compile-bytecode --python "$WORK/v/bin/python" --no-index --no-deps "$H"/wheels/*.whl
  done
  rm -rf "$H"
done
"$PY" - "$OUT/speed.txt" <<'PYEOF' | tee -a "$OUT/summary.txt"
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    s, label, ms = line.split()
    runs.setdefault((s, label), []).append(int(ms) / 1000)
base = {"wh": "uv", "wh-zlib": "uv", "uv": "uv", "wh-compile": "uv-compile", "uv-compile": "uv-compile",
        "wh-precompiled": "uv-compile"}
for (s, label), times in runs.items():
    med = statistics.median(times)
    ref = statistics.median(runs.get((s, base[label]), times))
    print(f"{s:5s} {label:12s} median {med:7.2f} s  range {min(times):.2f}-{max(times):.2f}  ratio to {base[label]}: {med / ref:.2f}x")
PYEOF
rm -rf "$WORK"
exit $FAIL
