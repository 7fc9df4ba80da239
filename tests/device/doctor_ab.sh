#!/usr/bin/env bash
# Two (or more) builds of wh's doctor on the offline H200 box's stock image, in one machine's runs: which is
# faster, and do they judge alike. A speed change to the doctor is kept only with a number measured here (docs/design.md, the
# speed budget); the box's machines are scarce, so both builds go in the same call.
#
# On the networked host: a wheelhouse whose bootstrap/ carries wh's requirements, and the two wh wheels:
#   .venv/bin/wh stage manifests/freetoken-h200.toml -o .device/ft-wh
#   git worktree add --detach /tmp/wh-a REV_A && .venv/bin/pip wheel -q --no-deps --no-build-isolation -w .device/whl-a /tmp/wh-a
#   .venv/bin/pip wheel -q --no-deps --no-build-isolation -w .device/whl-b .
# then on the box (repo root as cwd, .device carried):
#   ROUNDS=2 bash tests/device/doctor_ab.sh .device/ft-wh .device/whl-a/wh-*.whl .device/whl-b/wh-*.whl [C.whl ...]
#
# The first run (A, the machine's disk cold) stands for a fresh box; then ROUNDS alternating pairs with every cache
# emptied (the disk warm; a third build C, D... joins each round, the order rotating): one line per run with its
# seconds, verdict counts and the slowest groups' spans, the medians, and the checks whose verdicts differ from
# A's (there should be none). PROFILE=1 and a py-spy next to this script (.device/py-spy): one more run of B
# under `py-spy record --gil`, to $OUT/profgil.txt. COLD=1: the page cache is dropped before every run, so each
# stands for a fresh box. Exit 1 when a doctor failed to run or two judged differently.
set -u
WH_DIR=$(realpath "${1:?usage: doctor_ab.sh WHEELHOUSE A.whl B.whl [C.whl ...]}")
shift
[ $# -ge 2 ] || { echo "usage: doctor_ab.sh WHEELHOUSE A.whl B.whl [C.whl ...]"; exit 2; }
NAMES=(a b c d e f)
VARIANTS=()
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/wh-doctor-ab-out}
ROUNDS=${ROUNDS:-2}
WORK=$(mktemp -d /tmp/wh-doctor-ab.XXXX)
mkdir -p "$OUT"
FAIL=0
for wheel in "$@"; do
  v=${NAMES[${#VARIANTS[@]}]}
  VARIANTS+=("$v")
  wheel=$(realpath "$wheel")
  "$PY" -m venv --without-pip "$WORK/wh-$v"
  (cd "$WH_DIR" && "$PY" -m pip --python "$WORK/wh-$v/bin/python" install -q --no-index --find-links bootstrap/ "$wheel") \
    >"$OUT/bootstrap-$v.log" 2>&1 || { echo "== bootstrap of $v failed: $(tail -2 "$OUT/bootstrap-$v.log")"; exit 1; }
done

doctor() {  # doctor a|b TAG [PREFIX...]: one run with empty caches, its report in $OUT/TAG.json
  local v=$1 tag=$2 t0 rc
  shift 2
  export WH_CACHE_DIR="$WORK/cache-$tag"
  rm -rf "$WH_CACHE_DIR"
  if [ "${COLD:-0}" = 1 ]; then  # every run a fresh box's: the page cache emptied (root, a writable /proc/sys)
    sync; echo 3 2>/dev/null >/proc/sys/vm/drop_caches || echo "== $tag: the page cache cannot be dropped here"
  fi
  t0=$(date +%s.%N)
  WH_DOCTOR_TRACE="$OUT/trace-$tag.jsonl" "$@" "$WORK/wh-$v/bin/wh" doctor --python "$PY" --json >"$OUT/$tag.json" 2>"$OUT/$tag.err"
  rc=$?
  "$PY" - "$OUT/$tag.json" "$tag" "$rc" "$(date +%s.%N)" "$t0" <<'PY' | tee -a "$OUT/runs.txt"
import collections, json, sys
path, tag, rc, t1, t0 = sys.argv[1:]
try:
    d = json.load(open(path))
except ValueError:
    print(f"{tag}: rc={rc}, no report"); sys.exit()
verdicts = collections.Counter(r["verdict"] for r in d["results"])
groups = sorted((d.get("facts") or {}).get("group_seconds", {}).items(), key=lambda g: -g[1][-1])[:4]
print(f"{tag}: {float(t1) - float(t0):.1f} s rc={rc} {dict(verdicts)}; " + ", ".join(f"{g} {a}-{b}" for g, (a, b) in groups))
PY
  [ "$rc" -le 2 ] || FAIL=1
}

doctor a cold-a
n=${#VARIANTS[@]}
for i in $(seq "$ROUNDS"); do
  for j in $(seq 0 $((n - 1))); do  # rotate the order each round: no build always runs first
    v=${VARIANTS[$(((i + j) % n))]}
    doctor "$v" "$v$i"
  done
done
"$PY" - "$OUT" "${VARIANTS[@]}" <<'PY' || FAIL=1
import json, re, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
times = {v: [] for v in names}
for line in open(f"{out}/runs.txt"):
    m = re.match(r"([a-f])\d+: ([\d.]+) s", line)
    if m:
        times[m.group(1)].append(float(m.group(2)))
for v, ts in times.items():
    if ts:
        print(f"== {v}: median {statistics.median(ts):.1f} s ({min(ts):.1f}-{max(ts):.1f}) over {len(ts)} warm-disk runs")
verdicts = {v: {r["id"]: r["verdict"] for r in json.load(open(f"{out}/{v}1.json"))["results"]} for v in names}
differ = {f"{k} ({v})": (verdicts["a"].get(k), verdicts[v].get(k)) for v in names[1:]
          for k in verdicts["a"].keys() | verdicts[v].keys() if verdicts["a"].get(k) != verdicts[v].get(k)}
print(f"== verdicts that differ from a's: {differ or 'none'}")
sys.exit(1 if differ else 0)
PY
SPY="$(dirname "$(realpath "$0")")/../../.device/py-spy"
if [ "${PROFILE:-0}" = 1 ] && [ -x "$SPY" ]; then
  doctor b profile "$SPY" record --gil -r 100 -f raw -o "$OUT/profgil.txt" --
fi
exit $FAIL
