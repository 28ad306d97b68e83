package ratelimit

import (
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkAdmit measures one Admit call on a fetched batch of 100 items,
// against a local redis-server (loopback, one client, sequential calls), for
// each kind of limit. Limits are set so that every item passes (the cost of
// admitting), except window_exhausted (every item deferred). It reports
// Redis round trips per batch (counted with a go-redis hook: one per
// command or pipeline) and µs per task (time per batch / 100).
func BenchmarkAdmit(b *testing.B) {
	// b.Log of a parent benchmark is not shown; the method goes to stdout.
	fmt.Println("BenchmarkAdmit method: Admit on batches of 100 items, one go-redis client, local redis-server " +
		"(testenv, loopback), sequential calls; round trips counted with a go-redis hook; " +
		"µs/task = ns/op / 100 / 1000. concurrency uses slot_ttl 1s and never releases, so " +
		"the slot set holds about one second of admissions; concurrency_with_done also calls Done " +
		"for every admitted task (one ZREM round trip each), as a worker does when a handler ends.")
	srv := testenv.StartRedis(b)
	big := int64(MaxLimit)
	window := &WindowQuota{Limit: big, Window: dur(24 * time.Hour)}
	bucket := &TokenBucket{Rate: MaxRate, Burst: big}
	conc := &Concurrency{Limit: big, SlotTTL: dur(time.Second)}
	all := Rule{WindowQuota: window, TokenBucket: bucket, Concurrency: conc}
	one := func(typ string, r Rule) StaticRules { return StaticRules{typ: r} }
	four := StaticRules{}
	var fourTypes []Item
	for k := range 4 {
		typ := fmt.Sprintf("t%d", k)
		four[typ] = all
		fourTypes = append(fourTypes, items(typ, 25, k)...)
	}
	cases := []struct {
		name  string
		rules StaticRules
		batch []Item
	}{
		{"no_rule", StaticRules{}, items("x", 100, 0)},
		{"window_quota", one("x", Rule{WindowQuota: window}), items("x", 100, 0)},
		{"window_exhausted", one("x", Rule{WindowQuota: &WindowQuota{Limit: 1, Window: dur(24 * time.Hour)}}), items("x", 100, 0)},
		{"token_bucket", one("x", Rule{TokenBucket: bucket}), items("x", 100, 0)},
		{"concurrency", one("x", Rule{Concurrency: conc}), items("x", 100, 0)},
		{"concurrency_with_done", one("x", Rule{Concurrency: conc}), items("x", 100, 0)},
		{"all_three", one("x", all), items("x", 100, 0)},
		{"all_three_4_types", four, fourTypes},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			rdb := srv.Client(b)
			hook := new(countHook)
			rdb.AddHook(hook)
			l := newLimiter(b, rdb, testNS(b), c.rules, Options{})
			ctx := b.Context()
			if _, err := l.Admit(ctx, c.batch); err != nil { // loads the script, opens the connection
				b.Fatal(err)
			}
			before := hook.roundTrips()
			start := time.Now()
			n := 0
			withDone := c.name == "concurrency_with_done"
			for b.Loop() {
				ds, err := l.Admit(ctx, c.batch)
				if err != nil {
					b.Fatal(err)
				}
				if withDone { // what a worker adds per task when its handler ends
					for i, d := range ds {
						if err := l.Done(ctx, c.batch[i], d); err != nil {
							b.Fatal(err)
						}
					}
				}
				n++
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(hook.roundTrips()-before)/float64(n), "roundtrips/batch")
			b.ReportMetric(float64(elapsed.Microseconds())/float64(n*len(c.batch)), "µs/task")
		})
	}
}

// BenchmarkAdmitKeyed measures redis-server's own CPU (INFO cpu,
// used_cpu_user + used_cpu_sys, read around each phase) per admitted task
// for a concurrency rule of the type scope and the same rule per key
// (issue 45's target: keyed within about 1 µs of the type scope). One
// iteration, per batch size (64 and 200, a worker's fetch), on one fresh
// redis-server: 10,000 tasks with 10,000 distinct keys, due now, admitted
// in batches of that size (keys shuffled per round), then each finished
// with Done (a worker's handler end; the releases Done queued are flushed
// before the CPU is read, so that they count as Done's); 5 rounds. The type
// rule has a limit no batch reaches; the key rule is
// {"scope":"key","concurrency":{"limit":1}} (ordered: its queue lookups
// included), so that every task passes and every round finds its key free
// again. Admit and Done are measured apart.
//
//	go test ./internal/ratelimit -run '^$' -bench BenchmarkAdmitKeyed -benchtime 1x -count 3
func BenchmarkAdmitKeyed(b *testing.B) {
	const keys, rounds = 10_000, 5
	for _, batch := range []int{64, 200} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			for range b.N {
				srv := testenv.StartRedis(b)
				rdb := srv.Client(b)
				conc := func(limit int64) *Concurrency { return &Concurrency{Limit: limit, SlotTTL: dur(time.Minute)} }
				modes := []struct {
					name string
					rule Rule
				}{
					{"type", Rule{Concurrency: conc(MaxLimit)}},
					{"key", Rule{Scope: "key", Concurrency: conc(1)}},
				}
				admitUS, totalUS := map[string]float64{}, map[string]float64{}
				for _, m := range modes {
					l := newLimiter(b, rdb, "bench-"+m.name, StaticRules{"t": m.rule}, Options{})
					admit, done := benchKeyedRounds(b, rdb, l, keys, rounds, batch)
					admitUS[m.name], totalUS[m.name] = admit, admit+done
					fmt.Printf("BenchmarkAdmitKeyed batch %d %-4s: redis CPU %.2f µs/task admitting, %.2f µs/task Done (%d tasks x %d rounds)\n",
						batch, m.name, admit, done, keys, rounds)
					b.ReportMetric(admit, m.name+"-admit-us/task")
					b.ReportMetric(done, m.name+"-done-us/task")
				}
				fmt.Printf("BenchmarkAdmitKeyed batch %d: key scope costs %+.2f µs/task of redis CPU more than the type scope to admit, %+.2f µs/task to admit and release\n",
					batch, admitUS["key"]-admitUS["type"], totalUS["key"]-totalUS["type"])
				b.ReportMetric(admitUS["key"]-admitUS["type"], "key-extra-us/task")
				b.ReportMetric(totalUS["key"]-totalUS["type"], "key-extra-total-us/task")
			}
		})
	}
}

// benchKeyedRounds admits n tasks of n keys in batches of batch, rounds
// times, calling Done for each after each round, and returns redis-server's
// CPU per task (µs) of the admissions and of the Dones.
func benchKeyedRounds(b *testing.B, rdb redis.UniversalClient, l *Limiter, n, rounds, batch int) (admitUS, doneUS float64) {
	ctx := b.Context()
	all := make([]Item, n)
	due := time.Now()
	for i := range all {
		all[i] = Item{ID: fmt.Sprintf("task-%06d", i), Type: "t", Key: fmt.Sprintf("cust-%05d", i), Due: due}
	}
	if _, err := l.Admit(ctx, all[:1]); err != nil { // loads the script
		b.Fatal(err)
	}
	if err := l.rdb.FlushDB(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	var admitCPU, doneCPU time.Duration
	ds := make([]Decision, n)
	for range rounds {
		mrand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		c0 := testenv.RedisCPU(b, rdb)
		for from := 0; from < n; from += batch {
			got, err := l.Admit(ctx, all[from:min(from+batch, n)])
			if err != nil {
				b.Fatal(err)
			}
			copy(ds[from:], got)
		}
		c1 := testenv.RedisCPU(b, rdb)
		for i := range all {
			if !ds[i].Run {
				b.Fatalf("task %s deferred: %+v", all[i].ID, ds[i])
			}
			if err := l.Done(ctx, all[i], ds[i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.Flush(ctx); err != nil { // the releases go out now, counted as Done's
			b.Fatal(err)
		}
		c2 := testenv.RedisCPU(b, rdb)
		admitCPU += c1 - c0
		doneCPU += c2 - c1
	}
	tasks := float64(n * rounds)
	return float64(admitCPU.Nanoseconds()) / 1000 / tasks, float64(doneCPU.Nanoseconds()) / 1000 / tasks
}

// BenchmarkAdmitKeyedSteady measures redis-server's CPU (INFO cpu) per
// task admitted and released the way a busy worker does it: batches of 32
// admitted one after the other, each batch's tasks done (Done) once the
// batch two after it is admitted, so that about 64-96 slots are held at
// any time (a worker's concurrency and its fetch), and the releases go out
// with the next Admit (release.go). BenchmarkAdmitKeyed holds every slot
// of a round at once (10,000 members), which is not the set a worker's
// admissions meet. The type rule has a limit no batch reaches; the key
// rule is {"scope":"key","concurrency":{"limit":1}} (ordered). 60,000
// tasks over 10,000 keys per pass; passes alternate type, key, key, type
// for rounds rounds. It prints this process' CPU per task too (the
// Limiter's Go side and go-redis; run with -cpuprofile to see where).
//
//	go test ./internal/ratelimit -run '^$' -bench BenchmarkAdmitKeyedSteady -benchtime 1x
func BenchmarkAdmitKeyedSteady(b *testing.B) {
	const n, keys, batch, lag, rounds = 60_000, 10_000, 32, 2, 3
	for range b.N {
		srv := testenv.StartRedis(b)
		rdb := srv.Client(b)
		conc := func(limit int64) *Concurrency { return &Concurrency{Limit: limit, SlotTTL: dur(time.Minute)} }
		rules := map[string]Rule{"type": {Concurrency: conc(MaxLimit)}, "key": {Scope: "key", Concurrency: conc(1)}}
		us, goUs, inUs := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		for r := range rounds {
			order := []string{"type", "key"}
			if r%2 == 1 {
				order = []string{"key", "type"}
			}
			for _, name := range order {
				l := newLimiter(b, rdb, fmt.Sprintf("steady-%s-%d", name, r), StaticRules{"t": rules[name]}, Options{})
				all := make([]Item, n)
				due := time.Now()
				for i := range all {
					all[i] = Item{ID: fmt.Sprintf("task-%06d", i), Type: "t", Key: fmt.Sprintf("cust-%05d", i%keys), Due: due}
				}
				d0, err := l.Admit(b.Context(), all[:1]) // loads the script
				if err != nil {
					b.Fatal(err)
				}
				_ = l.Done(b.Context(), all[0], d0[0])
				if err := l.Flush(b.Context()); err != nil {
					b.Fatal(err)
				}
				ds := make([]Decision, n)
				c0, p0, s0 := testenv.RedisCPU(b, rdb), testenv.ProcessCPU(), testenv.CommandStats(b, rdb)
				for from, k := 0, 0; from < n; from, k = from+batch, k+1 {
					got, err := l.Admit(b.Context(), all[from:min(from+batch, n)])
					if err != nil {
						b.Fatal(err)
					}
					copy(ds[from:], got)
					if k >= lag {
						old := from - lag*batch
						for i := old; i < old+batch; i++ {
							if !ds[i].Run {
								b.Fatalf("task %s deferred: %+v", all[i].ID, ds[i])
							}
							_ = l.Done(b.Context(), all[i], ds[i])
						}
					}
				}
				if err := l.Flush(b.Context()); err != nil {
					b.Fatal(err)
				}
				p1 := testenv.ProcessCPU()
				us[name] = append(us[name], float64((testenv.RedisCPU(b, rdb)-c0).Nanoseconds())/1000/n)
				goUs[name] = append(goUs[name], float64((p1-p0).Nanoseconds())/1000/n)
				inUs[name] = append(inUs[name], commandsUsec(s0, testenv.CommandStats(b, rdb))/n)
			}
		}
		for _, name := range []string{"type", "key"} {
			fmt.Printf("BenchmarkAdmitKeyedSteady %-4s: redis CPU per task admitted and released %s µs (of which inside its commands %s), this process (the Limiter, go-redis) %s µs (batches of %d, ~%d slots held)\n",
				name, testenv.JoinFloats(us[name], 2), testenv.JoinFloats(inUs[name], 2), testenv.JoinFloats(goUs[name], 2), batch, (lag+1)*batch)
		}
		extra := make([]float64, rounds)
		for r := range extra {
			extra[r] = us["key"][r] - us["type"][r]
		}
		fmt.Printf("BenchmarkAdmitKeyedSteady: the key scope costs %s µs/task more than the type scope (per round)\n", testenv.JoinFloats(extra, 2))
		b.ReportMetric(testenv.Median(inUs["type"]), "type-cmd-us/task")
		b.ReportMetric(testenv.Median(inUs["key"]), "key-cmd-us/task")
		b.ReportMetric(testenv.Median(us["type"]), "type-us/task")
		b.ReportMetric(testenv.Median(us["key"]), "key-us/task")
		b.ReportMetric(testenv.Median(goUs["type"]), "type-go-us/task")
		b.ReportMetric(testenv.Median(goUs["key"]), "key-go-us/task")
	}
}

// commandsUsec is the µs redis-server spent inside the commands this
// benchmark sends between two INFO commandstats: the admission scripts
// (EVALSHA, EVAL on a reload) and the releases (a plain ZREM or the
// release scripts). A script's own commands count within its time, and
// again under their names, so only ZREM is added: the scripts this
// benchmark runs (admit.lua, the batch of distinct keys in admitkeyed.lua)
// call none. Unlike the server's CPU, it leaves out the reading and
// writing of the connections, which a loaded 2-core host inflates most.
func commandsUsec(before, after map[string]testenv.CommandStat) float64 {
	var us int64
	for _, c := range []string{"evalsha", "eval", "zrem"} {
		us += after[c].Usec - before[c].Usec
	}
	return float64(us)
}
