#!/usr/bin/env bash
# The device run: unpacks .pack/pack.txz (built by bench/offline/build-pack.sh)
# and runs four benchmarks one after the other, each under its own timeout,
# with its output in a file under $OUT. Run from the repository root:
#
#   OUT=/some/dir bash bench/offline/run.sh
#
# Files under $OUT (8, the most a device call brings back):
#   run.log       machine, pack BUILDINFO, each part's command, exit code and
#                 duration, and the key lines of every part
#   scale.log, scale.json      a. bench/cmd/scale (make bench-scale)
#   compare.log, compare.json, compare.md   b. bench/cmd/compare (make bench)
#   work.log      c. go test ./worker -bench BenchmarkThroughput
#   lag.log       d. go test ./integration -bench BenchmarkLag (make bench-lag)
#
# Overrides (environment):
#   PARTS             parts to run, in order (default "scale compare work lag")
#   TOTAL_BUDGET      seconds for the whole script (default 540); a part's
#                     timeout is cut to what is left, a part with < 20s left
#                     is skipped
#   PACK=.pack/pack.txz  PACK_DIR=/tmp/d (unpacked there; reused when it
#                     holds this very pack already)
#   a. SCALE_MASTERS (1,2,4,8)  SCALE_SIZES (the size flags, see below)
#      SCALE_FLAGS (more flags, e.g. -short)  SCALE_TIMEOUT (230)
#   b. COMPARE_ONLY (throughput,handling)  COMPARE_FLAGS ("": the full plan;
#      -short for the small one)  COMPARE_TIMEOUT (120)
#   c. WORK_TASKS (40000, DQ_BENCH_TASKS)  WORK_TIMEOUT (60)
#   d. LAG_RUNS (3, DQ_BENCH_RUNS)  LAG_EVENTS (2, DQ_BENCH_EVENTS)
#      LAG_FLAGS (more env for it, e.g. "DQ_BENCH_AOF=0")  LAG_TIMEOUT (100)
set -u
T0=$SECONDS
root=$(pwd)
if ! head -1 "$root/go.mod" 2>/dev/null | grep -q '^module github.com/delayq/delayq$'; then
	echo "device-run: run from the delayq repository root (cwd $root)" >&2
	exit 2
fi
: "${OUT:?device-run: set OUT to the output directory}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/run.log
: >"$LOG"
note() { echo "$*" | tee -a "$LOG"; }

BUDGET=${TOTAL_BUDGET:-540}
PARTS=${PARTS:-scale compare work lag}
PACK=${PACK:-$root/.pack/pack.txz}
D=${PACK_DIR:-/tmp/d}

note "# device-run $(date -u +%FT%TZ), cwd $root, budget ${BUDGET}s, parts: $PARTS"
note "# nproc: $(nproc)"
{ lscpu | head -20; echo "# free -g:"; free -g; echo "# load: $(cat /proc/loadavg)"; echo "# ulimit -n: $(ulimit -n)"; } 2>&1 | tee -a "$LOG"

# unpack (python3's tarfile: no xz on the device is assumed)
sum=$(cksum <"$PACK" | cut -d' ' -f1)
if [ -f "$D/pack/.cksum" ] && [ "$(cat "$D/pack/.cksum")" = "$sum" ]; then
	note "# pack already unpacked in $D (cksum $sum)"
else
	rm -rf "$D" && mkdir -p "$D"
	t=$SECONDS
	python3 - "$PACK" "$D" <<'EOF' || { note "device-run: unpack failed"; exit 3; }
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
    t.extractall(sys.argv[2], **kw)
EOF
	echo "$sum" >"$D/pack/.cksum"
	note "# unpacked $PACK ($(stat -c %s "$PACK") bytes) into $D in $((SECONDS - t))s"
fi
export PATH="$D/pack/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
sed 's/^/# /' "$D/pack/BUILDINFO" | tee -a "$LOG"
note "# go on PATH: $(command -v go) ($(go version)); redis-server: $(command -v redis-server): $(redis-server --version 2>&1)"
if ! redis-cli --version >/dev/null 2>&1; then note "device-run: WARNING: the bundled redis-cli does not run"; fi

declare -A RC DUR
# stray: the processes a part left behind (they carry DQ_PACK_PART=<part>
# in their environment, inherited from the part's command): listed, killed.
stray() {
	local part=$1 pids="" pid
	for pid in $(ls /proc | grep -E '^[0-9]+$'); do
		[ "$pid" = $$ ] && continue
		if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "DQ_PACK_PART=$part"; then
			pids="$pids $pid"
		fi
	done
	if [ -n "$pids" ]; then
		note "# $part left processes behind, killing them:"
		ps -o pid,etime,args -p "${pids# }" | tee -a "$LOG"
		kill -9 $pids 2>/dev/null
	fi
}
# part NAME TIMEOUT DIR LOGFILE CMD...: runs CMD in DIR under timeout (SIGINT,
# SIGKILL 15s later), output to LOGFILE and stdout.
part() {
	local name=$1 limit=$2 dir=$3 logf=$4
	shift 4
	local left=$((BUDGET - (SECONDS - T0) - 20))
	[ "$limit" -gt "$left" ] && limit=$left
	if [ "$limit" -lt 20 ]; then
		note "## $name: skipped, ${left}s of the budget left"
		RC[$name]=skipped DUR[$name]=0
		return
	fi
	note ""
	note "## $name: $(date -u +%T), timeout ${limit}s, in ${dir#"$root"/}: $*"
	local t=$SECONDS
	(cd "$dir" && exec env DQ_PACK_PART="$name" timeout -s INT -k 15 "$limit" "$@") 2>&1 | tee "$logf"
	local rc=${PIPESTATUS[0]}
	[ "$rc" = 124 ] && rc="124 (timed out)"
	RC[$name]=$rc DUR[$name]=$((SECONDS - t))
	note "## $name: exit $rc after ${DUR[$name]}s"
	stray "$name"
}

for p in $PARTS; do
	case $p in
	scale)
		# -scale-procs: per k masters, k daemons, k event and 2k work
		# processes; -clients 16 (default 4): client goroutine c uses daemon
		# c mod daemons, so 4 clients would leave k=8's daemons 5..8 idle
		SCALE_SIZES=${SCALE_SIZES:--scale-procs -clients 16 -schedule 150000 -burst 80000 -handled 30000 -lag-rate 2000 -lag-duration 8s -timeout 30s}
		# shellcheck disable=SC2086
		part scale "${SCALE_TIMEOUT:-230}" "$root" "$OUT/scale.log" \
			scale -masters "${SCALE_MASTERS:-1,2,4,8}" $SCALE_SIZES ${SCALE_FLAGS:-} -out "$OUT/scale.json"
		;;
	compare)
		# shellcheck disable=SC2086
		part compare "${COMPARE_TIMEOUT:-120}" "$root" "$OUT/compare.log" \
			compare ${COMPARE_FLAGS:-} -only "${COMPARE_ONLY:-throughput,handling}" \
			-out "$OUT/compare.json" -md /tmp/compare.md -charts /tmp/compare-charts
		;;
	work)
		part work "${WORK_TIMEOUT:-60}" "$root/worker" "$OUT/work.log" \
			env DQ_BENCH_TASKS="${WORK_TASKS:-40000}" \
			w.test -test.run '^$' -test.bench BenchmarkThroughput -test.benchtime 1x -test.count 1 -test.timeout 20m
		;;
	lag)
		# shellcheck disable=SC2086
		part lag "${LAG_TIMEOUT:-100}" "$root/integration" "$OUT/lag.log" \
			env DQ_BENCH_RUNS="${LAG_RUNS:-3}" DQ_BENCH_EVENTS="${LAG_EVENTS:-2}" ${LAG_FLAGS:-} \
			integration.test -test.run '^$' -test.bench BenchmarkLag -test.benchtime 1x -test.count 1 -test.timeout 20m
		;;
	lag2)
		# the lag benchmark on two CPUs of this machine (taskset: every
		# process of it, redis-server and the binaries included), a quiet
		# stand-in for the 2-core box; DQ_FIRE_AHEAD 0 (fire when due) and
		# the default (5ms) alternate, one run each
		part lag2 "${LAG2_TIMEOUT:-110}" "$root/integration" "$OUT/lag2.log" \
			bash -c 'for a in ${LAG2_AHEADS:-0 5 0 5}; do echo "### lag2: DQ_FIRE_AHEAD=${a}ms, CPUs 0,1"; $(command -v taskset >/dev/null && echo taskset -c 0,1) env DQ_BENCH_RUNS=1 DQ_BENCH_EVENTS=2 DQ_BENCH_EVENT_ENV=DQ_FIRE_AHEAD=${a}ms integration.test -test.run "^\$" -test.bench BenchmarkLag -test.benchtime 1x -test.count 1 -test.timeout 20m; done'
		;;
	*) note "## $p: unknown part (scale, compare, work, lag)"; RC[$p]=unknown ;;
	esac
done

# the key lines, for the call's output tail
note ""
note "# ===== key lines ====="
if [ -f "$OUT/scale.log" ]; then
	note "# scale:"
	{ sed -n '/^## summary/,/^# wrote/p' "$OUT/scale.log" | grep -v '^  - '; grep -E 'NOTE: k=|FAIL|interrupted|panic' "$OUT/scale.log" | cut -c1-240 | head -8; } | tee -a "$LOG"
fi
if [ -f "$OUT/compare.log" ]; then
	note "# compare:"
	grep -E 'tasks/s|records/s|delayq / asynq|FAIL|panic|interrupted|done in|^elapsed' "$OUT/compare.log" | grep -v '^NOTE' | cut -c1-180 | head -18 | tee -a "$LOG"
fi
if [ -f "$OUT/work.log" ]; then
	note "# work:"
	grep -E '^Benchmark|tasks/s|msgs/s|FAIL|panic|^ok|^PASS' "$OUT/work.log" | cut -c1-180 | head -12 | tee -a "$LOG"
fi
if [ -f "$OUT/lag.log" ]; then
	note "# lag:"
	grep -E 'spread over|TOTAL|ns/op|FAIL|panic|^ok|^PASS' "$OUT/lag.log" | cut -c1-180 | tail -12 | tee -a "$LOG"
fi
if [ -f "$OUT/lag2.log" ]; then
	note "# lag2:"
	grep -E '### lag2|run 1: (take|transit|TOTAL|raw)|FAIL|panic' "$OUT/lag2.log" | cut -c1-180 | tee -a "$LOG"
fi
note ""
note "# ===== exit codes ====="
for p in $PARTS; do note "# $p: exit ${RC[$p]:-?} in ${DUR[$p]:-?}s"; done
note "# total $((SECONDS - T0))s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
