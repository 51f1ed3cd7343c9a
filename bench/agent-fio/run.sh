#!/usr/bin/env bash
# Benchmark (not a test): fio through a volume served by greenreplica-storage with `file`
# members, against fio on a plain file on the same disk. Writes bench/results/agent-fio.json.
#
#   sudo bash bench/agent-fio/run.sh            # RUNTIME=5 REPEAT=3 SIZE=1G by default
#   ONLY=seqwrite_1m OUT=/tmp/x.json bash …     # one job (for tuning, not for results)
#   LAYOUTS="single raid10 raid5 raid6" MEMBERS=4 OUT=bench/results/agent-fio-raid.json bash …
#
# LAYOUTS (default "single", the one volume of the first results) lists the volumes to
# measure, each of MEMBERS file members (single: one) with CHUNK bytes per chunk, all served
# by one agent. The first layout fills the top-level "agent" and "ratios" exactly as before;
# with more than one, "layouts" holds every layout's figures in the same shape.
#
# Both sides use the same fio jobs with O_DIRECT, and every write job ends with fsync, whose
# time counts (through the agent a flush travels ext4 → loop → FUSE fsync → fdatasync of each
# member). Through the agent an O_DIRECT write completes once it is in the members' page
# cache; it is durable after the next flush, which the agent honours. randwrite_4k_fdatasync
# makes every single write durable on both sides (the worst case for the agent: two FUSE
# round trips and a member fdatasync per write). Page caches are dropped before every job.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNTIME=${RUNTIME:-5}
REPEAT=${REPEAT:-3}
SIZE=${SIZE:-1G}
OUT=${OUT:-$ROOT/bench/results/agent-fio.json}
read -r -a LAYOUT_LIST <<<"${LAYOUTS:-single}"
MEMBERS=${MEMBERS:-4}
CHUNK=${CHUNK:-65536}
[ "$(id -u)" -eq 0 ] || { echo "agent-fio: run as root (it mounts a volume)" >&2; exit 1; }
for tool in fio jq; do command -v $tool >/dev/null || { echo "agent-fio: $tool is missing" >&2; exit 1; }; done

export PATH=$HOME/.cargo/bin:$PATH
(cd "$ROOT/contrib-storage" && cargo build --release --quiet)
BIN=$ROOT/contrib-storage/target/release/greenreplica-storage

WORK=$(mktemp -d /var/tmp/grs-agent-fio.XXXXXX)
AGENT=""
cleanup() {
	[ -n "$AGENT" ] && kill -TERM "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null
	awk -v w="$WORK" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m"; done
	# No loop device left is the usual case: grep finding nothing must not end the trap
	# (errexit applies in it) before the work directory is removed.
	{ losetup -a | grep -F "$WORK" || true; } | cut -d: -f1 | while read -r d; do losetup -d "$d"; done
	rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK"/{raw,mnt,members,state,run}

run_fio() { # run_fio DIR NAME ARGS... → prints fio's JSON
	sync
	echo 3 >/proc/sys/vm/drop_caches
	fio --output-format=json --name="$2" --directory="$1" --filename=bench.fio --size="$SIZE" \
		--ioengine=psync --direct=1 --time_based --runtime="$RUNTIME" --randseed=1 "${@:3}"
}

JOBS=(
	"randread_4k|--rw=randread --bs=4k --numjobs=4 --group_reporting"
	"randwrite_4k|--rw=randwrite --bs=4k --numjobs=4 --group_reporting --end_fsync=1"
	"randwrite_4k_fdatasync|--rw=randwrite --bs=4k --numjobs=4 --group_reporting --fdatasync=1"
	"seqread_1m|--rw=read --bs=1m"
	"seqwrite_1m|--rw=write --bs=1m --end_fsync=1"
)

layout_file() { # lay the file out once so reads read data and writes overwrite
	fio --name=layout --directory="$1" --filename=bench.fio --size="$SIZE" --rw=write --bs=1m \
		--ioengine=psync --direct=1 --end_fsync=1 >/dev/null
}

one_run() { # one_run DIR NAME ARGS... → {iops, bw_mib_s, lat_mean_us}
	run_fio "$@" | jq '[.jobs[0].read, .jobs[0].write] | map(select(.io_bytes > 0))[0]
		| {iops: .iops, bw_mib_s: (.bw / 1024), lat_mean_us: (.lat_ns.mean / 1000)}'
}

member_size=$(($(numfmt --from=iec "$SIZE") + (256 << 20)))
cat >"$WORK/agent.toml" <<CONF
[agent]
socket = "$WORK/run/control.sock"
state_dir = "$WORK/state"
runtime_dir = "$WORK/run"
CONF
mount_of() { # the mount point of a layout's volume
	echo "$WORK/mnt/$1"
}
for layout in "${LAYOUT_LIST[@]}"; do
	members=$MEMBERS
	[ "$layout" = single ] && members=1
	mkdir -p "$(mount_of "$layout")"
	cat >>"$WORK/agent.toml" <<CONF
[[volume]]
name = "bench-$layout"
layout = "$layout"
stripe_unit = $CHUNK
policy = "always-on"
[volume.export]
mount_point = "$(mount_of "$layout")"
CONF
	for i in $(seq 0 $((members - 1))); do
		cat >>"$WORK/agent.toml" <<CONF
[[volume.member]]
kind = "file"
path = "$WORK/members/$layout-$i.img"
size = $member_size
profile = "ssd"
CONF
	done
done
"$BIN" serve --config "$WORK/agent.toml" 2>"$WORK/agent.log" &
AGENT=$!
for layout in "${LAYOUT_LIST[@]}"; do
	for _ in $(seq 1 100); do findmnt "$(mount_of "$layout")" >/dev/null && break; sleep 0.2; done
	findmnt "$(mount_of "$layout")" >/dev/null || { cat "$WORK/agent.log" >&2; exit 1; }
done
layout_file "$WORK/raw"
for layout in "${LAYOUT_LIST[@]}"; do layout_file "$(mount_of "$layout")"; done

# Raw and agent runs alternate (raw, then each layout), REPEAT times per job, and the median
# run counts: this VM's disk speed drifts by tens of percent over minutes.
median='sort_by(.iops) | .[(length / 2 | floor)] + {runs_iops: map(.iops)}'
raw="{}"
agents="{}" # layout → job → figures
for job in "${JOBS[@]}"; do
	name=${job%%|*}
	args=${job#*|}
	[ -n "${ONLY:-}" ] && [ "$name" != "$ONLY" ] && continue
	raw_runs="[]"
	agent_runs="{}"
	for _ in $(seq 1 "$REPEAT"); do
		# shellcheck disable=SC2086
		raw_runs=$(echo "$raw_runs" | jq --argjson r "$(one_run "$WORK/raw" "$name" $args)" '. + [$r]')
		for layout in "${LAYOUT_LIST[@]}"; do
			# shellcheck disable=SC2086
			agent_runs=$(echo "$agent_runs" | jq --arg l "$layout" \
				--argjson r "$(one_run "$(mount_of "$layout")" "$name" $args)" '.[$l] += [$r]')
		done
	done
	raw=$(echo "$raw" | jq --arg n "$name" --argjson f "$(echo "$raw_runs" | jq "$median")" '. + {($n): $f}')
	agents=$(echo "$agents" | jq --arg n "$name" --argjson runs "$agent_runs" \
		"reduce (\$runs | keys_unsorted[]) as \$l (.; .[\$l][\$n] = (\$runs[\$l] | $median))")
	echo "agent-fio: $name raw $(echo "$raw" | jq -c ".$name.runs_iops") agent $(echo "$agents" | jq -c "map_values(.$name.runs_iops)")" >&2
done
first=${LAYOUT_LIST[0]}
if [ "$first" = single ]; then
	setup_volume="single layout, one file member"
else
	setup_volume="$first layout, $MEMBERS file members, chunk $CHUNK B"
fi
members_json=$(printf '%s\n' "${LAYOUT_LIST[@]}" | jq -R --argjson m "$MEMBERS" '{(.): (if . == "single" then 1 else $m end)}' | jq -s 'add')

jq -n --argjson raw "$raw" --argjson agents "$agents" --arg first "$first" --arg setup_volume "$setup_volume" \
	--argjson members "$members_json" --argjson chunk "$CHUNK" --arg size "$SIZE" --argjson runtime "$RUNTIME" --argjson repeat "$REPEAT" \
	--arg kernel "$(uname -r)" --arg date "$(date -u +%FT%TZ)" --arg cpus "$(nproc)" '
	def ratio(a; n; key): if a[n] and $raw[n] then (a[n][key] / $raw[n][key]) else null end;
	def ratios(a): {
	    randread_4k: ratio(a; "randread_4k"; "iops"),
	    randwrite_4k: ratio(a; "randwrite_4k"; "iops"),
	    randwrite_4k_fdatasync: ratio(a; "randwrite_4k_fdatasync"; "iops"),
	    seqread_1m: ratio(a; "seqread_1m"; "bw_mib_s"),
	    seqwrite_1m: ratio(a; "seqwrite_1m"; "bw_mib_s")
	  };
	$agents[$first] as $agent
	| {
	  date: $date, kernel: $kernel, cpus: ($cpus | tonumber), file_size: $size, runtime_s: $runtime, repeats: $repeat,
	  setup: "fio psync O_DIRECT on ext4 on the agent volume (\($setup_volume), FUSE image + loop) vs fio on a plain file in the same filesystem; random reads and writes with 4 jobs; every write job fsyncs at the end (randwrite_4k_fdatasync after every write); caches dropped before each run; raw and agent runs alternate and the median of the repeats counts",
	  layout: $first, raw: $raw, agent: $agent,
	  ratios: ratios($agent),
	  targets: {random_4k: 0.5, sequential_1m: 0.8}
	}
	| if ($agents | length) > 1 then
	    .layouts = ($agents | with_entries(.value = {members: $members[.key], chunk_bytes: $chunk,
	      agent: .value, ratios: ratios(.value)}))
	  else . end
	| .targets_met = {
	    random_4k: ((.ratios.randread_4k // 0) >= 0.5 and (.ratios.randwrite_4k // 0) >= 0.5),
	    sequential_1m: ((.ratios.seqread_1m // 0) >= 0.8 and (.ratios.seqwrite_1m // 0) >= 0.8)
	  }' >"$OUT"
echo "agent-fio: wrote $OUT" >&2
jq .ratios "$OUT"

/usr/bin/python3 "$(dirname "$0")/plot.py" "$OUT" >&2
