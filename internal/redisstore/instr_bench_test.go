package redisstore

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkRedisInstructions counts the instructions redis-server runs
// per task (valgrind's callgrind: every instruction of the process,
// network and event loop included) for each transition of a handled task,
// in the shapes of bench-scale's handled phase: schedules of 1,000 over 16
// shards, takes of 500 and their settles (a fire receipt per task, as the
// event process writes), and a worker's claims and finishes in batches of
// 224 and 16 spread over the 16 shards, a call per shard (a Redis Cluster
// node, as bench-scale's) and packed (a standalone redis-server). 16,000
// tasks per case, each case on a fresh server.
//
// Why instructions: the 2-vCPU VMs this project is measured on drift by
// 10-30% in CPU time within minutes and up to 2.5x from day to day
// (docs/benchmarks.md, session 41), which swamps a change of a few
// percent in any timed figure. An instruction count of the same inputs
// moves by under 0.5% from run to run (the random parts: the claims'
// sweep, HRANDFIELD's sample), whatever else the machine does. It is not
// time (a cache miss costs more than an add), so a change is judged by
// both: instructions to see it, bench-scale to see that time follows.
//
//	make bench-instr    # go test ./internal/redisstore -run '^$' -bench BenchmarkRedisInstructions -benchtime 1x
//
// Needs valgrind (Debian's package) besides redis-server; under it the
// server runs ~50x slower, so the run takes about two minutes.
func BenchmarkRedisInstructions(b *testing.B) {
	const n, shards = 16000, 16
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("%s not found: apt-get install valgrind (%v)", tool, err)
		}
	}
	for range b.N {
		fmt.Printf("\nredis-server instructions per task (callgrind), %d tasks over %d shards per case\n", n, shards)
		// fresh starts redis-server under callgrind and schedules n tasks
		// due at due (measured when measureSchedule)
		type server struct {
			s   *Store
			ids [][]string
			cg  *callgrind
		}
		fresh := func(due time.Time, pack bool, measureSchedule bool) server {
			cg := newCallgrind(b)
			r := testenv.StartRedis(b, testenv.RedisOptions{Wrap: cg.wrap()})
			rdb := r.Client(b)
			cg.pid = redisPid(b, rdb.Info(b.Context(), "server").Val())
			s, err := New(b.Context(), rdb, Options{Namespace: "instr", Shards: shards})
			if err != nil {
				b.Fatal(err)
			}
			s.pack = pack
			var ids [][]string
			if measureSchedule {
				cg.measure(b, "schedule, batches of 1000", n, func() { ids = scheduleBench(b, s, n, due) })
			} else {
				ids = scheduleBench(b, s, n, due)
			}
			return server{s, ids, cg}
		}
		past := time.Now().Add(-time.Second)

		sv := fresh(past, true, true)
		var takes []settleArgs
		sv.cg.measure(b, "take, batches of 500", n, func() {
			takes = takeSettleArgs(b, sv.s, 500)
		})
		sv.cg.measure(b, "settle, a fire receipt per task", n, func() {
			for _, t := range takes {
				if _, err := sv.s.SettleAcks(b.Context(), t.shard, 1, t.lease, nil, t.acks); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, shape := range []struct {
			g    int
			pack bool
		}{{224, false}, {224, true}, {16, false}, {16, true}} {
			sv := fresh(past, shape.pack, false)
			if got := drainShards(b, sv.s, 1000, time.Hour); got != n {
				b.Fatalf("took %d of %d", got, n)
			}
			calls := "a call per shard"
			if shape.pack {
				calls = "one call"
			}
			sv.cg.measure(b, fmt.Sprintf("claim+finish, batches of %d, %s", shape.g, calls), n, func() {
				claimFinishBatches(b, sv.s, roundRobin(sv.ids, n), shape.g)
			})
		}
	}
}

// settleArgs is what settles one take: its shard and lease, and a fire
// receipt for each of its tasks (as the event process writes them).
type settleArgs struct {
	shard int
	lease string
	acks  []Ack
}

// takeSettleArgs takes every due task of s (batch per take) and returns
// what settles each take.
func takeSettleArgs(b *testing.B, s *Store, batch int) []settleArgs {
	var out []settleArgs
	now := time.Now()
	eachTake(b, s, batch, time.Hour, func(sh int, t Taken) {
		a := settleArgs{shard: sh, lease: t.Lease}
		for i, tk := range t.Tasks {
			a.acks = append(a.acks, Ack{ID: tk.ID, Gen: tk.Gen, Attempt: max(tk.Attempt, 1), DueAt: tk.DueAt,
				FiredAt: now, Partition: int32(sh), Offset: int64(i), Token: 1})
		}
		out = append(out, a)
	})
	return out
}

// callgrind is one redis-server under valgrind's callgrind: its counters
// are zeroed before a measured part and dumped after (callgrind_control),
// each dump a file of its own in dir, read and removed by measure.
type callgrind struct {
	dir string
	pid int
}

func newCallgrind(b *testing.B) *callgrind { return &callgrind{dir: b.TempDir()} }

// wrap is the command that runs redis-server under callgrind.
func (c *callgrind) wrap() []string {
	return []string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + filepath.Join(c.dir, "cg.%p")}
}

// measure runs f between a zeroing and a dump of the counters and prints
// and reports the instructions per task of n.
func (c *callgrind) measure(b *testing.B, name string, n int, f func()) {
	c.control(b, "-z")
	f()
	c.control(b, "-d")
	// each dump is read and removed: the one here is this part's
	dumps, err := filepath.Glob(filepath.Join(c.dir, "cg."+strconv.Itoa(c.pid)+".*"))
	if err != nil || len(dumps) != 1 {
		b.Fatalf("want one callgrind dump in %s, found %v (%v)", c.dir, dumps, err)
	}
	ir := dumpInstructions(b, dumps[0])
	if err := os.Remove(dumps[0]); err != nil {
		b.Fatal(err)
	}
	per := float64(ir) / float64(n)
	fmt.Printf("  %-44s %9.0f instructions per task\n", name, per)
	b.ReportMetric(per, strings.NewReplacer(" ", "-", ",", "").Replace(name)+"-Ir/task")
}

func (c *callgrind) control(b *testing.B, arg string) {
	if out, err := exec.Command("callgrind_control", arg, strconv.Itoa(c.pid)).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %s: %v\n%s", arg, err, out)
	}
}

// dumpInstructions is a callgrind dump's total instruction count.
func dumpInstructions(b *testing.B, path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		for _, p := range []string{"summary: ", "totals: "} {
			if v, ok := strings.CutPrefix(line, p); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
					return n
				}
			}
		}
	}
	b.Fatalf("no instruction total in %s", path)
	return 0
}

// redisPid is process_id of an INFO server answer.
func redisPid(b *testing.B, info string) int {
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			if pid, err := strconv.Atoi(v); err == nil {
				return pid
			}
		}
	}
	b.Fatalf("no process_id in INFO server")
	return 0
}
