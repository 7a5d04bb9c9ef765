#!/usr/bin/env bash
# Four intellect-node sim members on this machine, H = 10: three at 100 ms
# per inner step and one at SLOW, every other flag default (extra flags for
# every member in EXTRA, e.g. "--overlap" or "--close-fraction 0"). Prints
# the fast members' compute utilization, the share of steps whose ring held
# the slow member, and the model hashes per step, over steps after WARM.
# Usage: scripts/mixed-speeds.sh BIN SLOW OUTER [EXTRA...]
set -euo pipefail
bin=$1 slow=$2 outer=$3; shift 3
dir=$(mktemp -d /tmp/mixed-speeds.XXXXXX)
warm=${WARM:-3}
base=$((20000 + RANDOM % 20000))
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
start() { # i step [flags]
	local i=$1 step=$2; shift 2
	nice -n 19 "$bin" start --device sim --sim-step "$step" --inner-steps 10 --max-outer-steps "$outer" \
		--min-members 4 --listen "/ip4/127.0.0.1/tcp/$((base + i))" --status "127.0.0.1:$((base + 100 + i))" \
		--home "$dir/n$i" --run mixed --checkpoint-every 1000000 "$@" >"$dir/n$i.log" 2>&1 &
	pids+=($!)
}
start 0 100ms "$@"
id=""
for _ in $(seq 100); do
	id=$(curl -s "127.0.0.1:$((base + 100))/v1/status" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("peer_id",""))' 2>/dev/null || true)
	[ -n "$id" ] && break
	sleep 0.2
done
boot="/ip4/127.0.0.1/tcp/$base/p2p/$id"
start 1 100ms --bootstrap "$boot" "$@"
start 2 100ms --bootstrap "$boot" "$@"
start 3 "$slow" --bootstrap "$boot" "$@"
for p in "${pids[@]}"; do wait "$p" || true; done
pids=()
python3 - "$dir" "$warm" <<'PY'
import json, sys, collections
d, warm = sys.argv[1], int(sys.argv[2])
hist = {}
for i in range(4):
    try:
        hist[i] = [json.loads(l) for l in open(f"{d}/n{i}/history.jsonl")]
    except FileNotFoundError:
        hist[i] = []
hashes = collections.defaultdict(set)
for i, rs in hist.items():
    for r in rs:
        if r["step"] > warm:
            hashes[r["step"]].add(r["model_hash"])
fast = [r for i in range(3) for r in hist[i] if r["step"] > warm]
util = sum(r["compute_sec"] for r in fast) / max(sum(r["wall_sec"] for r in fast), 1e-9)
steps = sorted(hashes)
slow_in = [r for r in hist[0] if r["step"] > warm and r["members"] == 4]
slow = [r for r in hist[3] if r["step"] > warm]
slow_util = sum(r["compute_sec"] for r in slow) / max(sum(r["wall_sec"] for r in slow), 1e-9)
n0 = [r for r in hist[0] if r["step"] > warm]
secs = sum(r["wall_sec"] for r in n0) / max(len(n0), 1)
print(f"steps {len(steps)} after {warm}: fast utilization {util:.3f}, slow member in {len(slow_in)}/{len(n0)} rings, "
      f"its utilization {slow_util:.3f}, {secs:.2f} s a step, hashes per step max {max((len(h) for h in hashes.values()), default=0)}")
PY
echo "logs: $dir"
