#!/usr/bin/env bash
# wh's resolver on the offline H200 box (CPython 3.12, no network at all).
#
#   bash tests/device/resolution.sh
#
# Proves, with wheels made on the spot and served from a folder and from an index on 127.0.0.1:
#   1. the box's own target (captured here: cp312, its glibc) picks the right wheel among cp311 /
#      cp312 / aarch64 / too-new-glibc builds, and markers are judged for that target;
#   2. resolving FROM the box for ANOTHER target (the bundled kaggle-4xl4 profile, glibc 2.35) picks
#      differently and refuses a manylinux_2_39-only package with the tags it does publish;
#   3. toolchain groups: nvcc 13.1 exists but crt only 13.0, so the group settles on 13.0; a forced
#      skew is refused with the chain;
#   4. dependencies come from HTTP range reads: bytes served << wheel size;
#   5. with no network, the default index fails with one clear line and a hint (no traceback);
#   6. tests/resolve and tests/index pass here when pytest is available.
# Evidence: $OUT/resolution.json (+ pytest log). A compact summary is printed at the end (< 1 min).
set -u
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-resolution-device-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/wh-resolve-dev.XXXX)
REPO=$PWD

# wh's deps for the resolver: packaging + resolvelib, importable already or pip's vendored copies.
DEPS="$WORK/deps"; mkdir -p "$DEPS"
export PYTHONPATH="$REPO:$REPO/tests/support:$DEPS${WH_BOX_DEPS:+:$WH_BOX_DEPS}"
VENDOR=$("$PY" -c "import os, pip; print(os.path.join(os.path.dirname(pip.__file__), '_vendor'))" 2>/dev/null)
for m in packaging resolvelib; do
  "$PY" -c "import $m" 2>/dev/null || { [ -n "$VENDOR" ] && [ -d "$VENDOR/$m" ] && ln -s "$VENDOR/$m" "$DEPS/$m"; }
done
"$PY" -c "import wheelhouse.resolve" 2>"$OUT/import.stderr" || { cat "$OUT/import.stderr"; echo "FAIL: wheelhouse.resolve does not import with $PY"; exit 1; }

"$PY" - "$WORK" "$OUT" <<'EOF'
import json, sys, threading, time
from http.server import ThreadingHTTPServer
from pathlib import Path

from index_fixtures import IndexServer, _make_handler
from wheelmaker import make_wheel

from wheelhouse.errors import WhError
from wheelhouse.index.http import HttpClient
from wheelhouse.index import PackageSource
from wheelhouse.manifest import ToolchainGroup
from wheelhouse.resolve import NoCompatibleWheel, ToolchainSkew, resolve
from wheelhouse.target import host_target, load_target

work, out = Path(sys.argv[1]), Path(sys.argv[2])
ev, summary, failed = {}, [], []

def check(name, ok, detail=""):
    summary.append(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    if not ok:
        failed.append(name)

box = host_target()
ev["box_target"] = {"describe": box.describe(), "tags": list(box.tags[:5]), "libc": box.libc}
glibc = box.glibc or (2, 17)
w = work / "wheels"
for tags in ("cp311-cp311-manylinux_2_17_x86_64", "cp312-cp312-manylinux_2_17_x86_64", "cp312-cp312-manylinux_2_28_x86_64",
             "cp312-cp312-manylinux_2_17_aarch64", f"cp312-cp312-manylinux_{glibc[0]}_{glibc[1] + 1}_x86_64"):
    make_wheel(w, "fastlib", "2.0", tags=tags, requires=['backport; python_version < "3.12"', 'gpuext; platform_machine == "x86_64"'])
make_wheel(w, "backport", "1.0")
make_wheel(w, "gpuext", "1.0")
make_wheel(w, "newglibc", "1.0", tags="cp312-cp312-manylinux_2_39_x86_64")
make_wheel(w, "heavy", "1.0", requires=["fastlib"], pad_bytes=8_000_000)
t = {"tags": "py3-none-manylinux_2_27_x86_64"}
for n, v in [("nvidia-cuda-nvcc", "13.0.48"), ("nvidia-cuda-nvcc", "13.1.80"), ("nvidia-cuda-crt", "13.0.48"), ("nvidia-cuda-cccl", "12.9.27")]:
    make_wheel(w, n, v, **t)
make_wheel(w, "kernels", "1.0", requires=["nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-cuda-cccl"])
make_wheel(w, "skewed", "1.0", requires=["nvidia-cuda-nvcc==13.1.80", "nvidia-cuda-crt==13.0.48"])

state = IndexServer()
state.add(w)
srv = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(state))
state.base = f"http://127.0.0.1:{srv.server_address[1]}"
threading.Thread(target=srv.serve_forever, daemon=True).start()
http_src = PackageSource([state.url])
folder_src = PackageSource((), [str(w)])

# 1. the box's own target
for label, src in (("index", http_src), ("find-links", folder_src)):
    r = resolve(["fastlib"], box, src)
    ev[f"box_{label}"] = r.to_json()
    chosen = r.pin("fastlib").distfile.filename
    check(f"box target via {label} picks the cp312 manylinux_2_28 x86_64 wheel", chosen == "fastlib-2.0-cp312-cp312-manylinux_2_28_x86_64.whl", chosen)
    check(f"markers judged for the box target via {label}", set(r.versions()) == {"fastlib", "gpuext"}, str(sorted(r.versions())))
if glibc >= (2, 39):
    r = resolve(["newglibc"], box, http_src)
    check("manylinux_2_39 wheel accepted for the box's glibc", r.pin("newglibc") is not None, f"glibc {glibc}")
else:
    summary.append(f"skip manylinux_2_39 acceptance: this box has glibc {glibc}")

# 2. another target, resolved from here
kaggle = load_target(Path("manifests/targets/kaggle-4xl4.json"))
try:
    resolve(["newglibc"], kaggle, http_src)
    check("kaggle target (glibc 2.35) refuses a manylinux_2_39-only package", False, "it resolved")
except NoCompatibleWheel as e:
    ev["kaggle_refusal"] = {"message": e.message, "hint": e.hint}
    check("kaggle target (glibc 2.35) refuses a manylinux_2_39-only package", "manylinux_2_39_x86_64" in e.message, e.message[:160])

# 3. toolchain groups
cuda = ToolchainGroup("cuda", ("nvidia-cuda-*",), exceptions=("nvidia-cuda-cccl",))
r = resolve(["kernels"], box, http_src, toolchains=[cuda])
v = r.versions()
ev["toolchain"] = v
check("toolchain group settles on one release", v["nvidia-cuda-nvcc"] == v["nvidia-cuda-crt"] == "13.0.48" and v["nvidia-cuda-cccl"] == "12.9.27", str(v))
try:
    resolve(["skewed"], box, http_src, toolchains=[cuda])
    check("toolchain skew refused", False, "it resolved")
except ToolchainSkew as e:
    ev["skew"] = e.message
    check("toolchain skew refused with the chain", "skewed==1.0 <- (requested)" in e.message, e.message.splitlines()[0][:120])

# 4. range reads
r = resolve(["heavy"], box, PackageSource([state.url]))
served = state.bytes_served("heavy-1.0-py3-none-any.whl")
size = (w / "heavy-1.0-py3-none-any.whl").stat().st_size
ev["range"] = {"served": served, "size": size, "stats": dict(r.stats)}
check("metadata by range reads", served * 50 < size, f"{served} of {size} bytes")

# 5. no network: the default index fails clearly
t0 = time.perf_counter()
try:
    resolve(["fastlib"], box, PackageSource(None, client=HttpClient(retries=1, backoff=0.1, timeout=5)))
    check("offline default index fails clearly", False, "it resolved?!")
except WhError as e:
    ev["offline"] = {"code": e.code, "message": e.message, "hint": e.hint, "seconds": round(time.perf_counter() - t0, 2)}
    check("offline default index fails clearly", e.code == "http" and bool(e.hint), f"{e.message[:100]} | hint: {e.hint}")

srv.shutdown()
(out / "resolution.json").write_text(json.dumps(ev, indent=2, default=str))
print("\n".join(summary))
sys.exit(1 if failed else 0)
EOF
RC=$?

if "$PY" -c "import pytest" 2>/dev/null; then
  "$PY" -m pytest -q -p no:cacheprovider tests/resolve tests/index >"$OUT/pytest.log" 2>&1
  PRC=$?
  echo "$([ $PRC = 0 ] && echo 'ok  ' || echo FAIL) pytest resolver/index/http suites: $(tail -1 "$OUT/pytest.log")"
  [ $PRC = 0 ] || RC=1
else
  echo "skip pytest suites: pytest is not installed in $PY"
fi
rm -rf "$WORK"
exit $RC
