package worker_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/ratelimit"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// BenchmarkKeyLimits: what a limit per key costs the worker (issue 45).
// One work process, no-op handler, concurrency 64, its live limits from
// etcd like the work binary's; 20,000 fired tasks (DQ_BENCH_TASKS), each
// of its own task key (DQ_BENCH_KEYS: task i has key i mod keys), so that
// 20,000 keys are active (they keep state in Redis until idle) and the
// rule defers none: the pure cost of the keys' state. (A deferred task
// would never come back here: no event process fires it again; with
// fewer keys than tasks, a key's two tasks may meet.) Three passes per
// round, in the reverse order every other round (ABBA), three rounds: no
// rule; {"scope":"key","concurrency":{"limit":1}}; and, for reference, a
// type-wide concurrency rule that never binds. Then the
// keyed type's Redis state: right after the run, and once the keys have
// been idle past the limiter's horizon (DQ_BENCH_IDLE_WAIT=0 skips that
// 80 s wait). The last round prints redis-server's time per task by
// command; each pass runs under the pprof label mode=<type> (noop, keyed,
// typed), so that a -cpuprofile splits the worker's CPU by pass (go tool
// pprof -tags, -tagfocus mode=keyed; kfake's goroutines are unlabelled).
//
//	make bench-keys
func BenchmarkKeyLimits(b *testing.B) {
	n, keys, rounds := 20000, 0, 3
	if v, err := strconv.Atoi(os.Getenv("DQ_BENCH_TASKS")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("DQ_BENCH_KEYS")); err == nil && v > 0 {
		keys = v
	}
	if keys == 0 {
		keys = n
	}
	if v, err := strconv.Atoi(os.Getenv("DQ_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	const conc = 64
	ns := fmt.Sprintf("bk%d", time.Now().UnixNano()%1e6)
	rs := startBenchRedis(b, ns, 16)
	rdb := rs.client
	modes := []struct{ name, typ string }{{"no rule", "noop"}, {"per key", "keyed"}, {"per type", "typed"}}
	var topics []string
	for r := range rounds {
		for _, m := range modes {
			topics = append(topics, fmt.Sprintf("bench.%s.%d", m.typ, r))
		}
	}
	k := testenv.StartKafka(b, append(slices.Clone(topics), "dq.dead")...)
	cli := testenv.StartEtcd(b).Client(b)
	rules, err := ratelimit.NewRules(cli, ns, nil)
	if err != nil {
		b.Fatal(err)
	}
	slot := ratelimit.Duration(10 * time.Second)
	if err := rules.Put(b.Context(), "keyed", ratelimit.Rule{Scope: "key", Concurrency: &ratelimit.Concurrency{Limit: 1, SlotTTL: slot}}); err != nil {
		b.Fatal(err)
	}
	if err := rules.Put(b.Context(), "typed", ratelimit.Rule{Concurrency: &ratelimit.Concurrency{Limit: ratelimit.MaxLimit, SlotTTL: slot}}); err != nil {
		b.Fatal(err)
	}
	live, err := worker.NewLiveLimits(cli, rdb, worker.LiveLimitsOptions{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	go func() { _ = live.Run(ctx) }()
	<-live.Ready()

	store, err := redisstore.New(b.Context(), rdb, redisstore.Options{Namespace: ns, Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	firer := &worktest.Firer{Store: store, Writer: worktest.NewWriter(b, k.Brokers)}
	prep := time.Now()
	for _, topic := range topics {
		typ := topic[len("bench.") : len(topic)-2]
		tasks := make([]*task.Task, n)
		for i := range tasks {
			tasks[i] = &task.Task{ID: topic + "-" + strconv.Itoa(i), Type: typ, Topic: topic, Key: "key-" + strconv.Itoa(i%keys),
				Payload: []byte(`{"order":12345}`), PayloadJSON: true}
		}
		worktest.Fire(b, firer, tasks...)
	}
	b.Logf("prepared %d fired tasks on each of %d topics in %v", n, len(topics), time.Since(prep).Round(time.Millisecond))

	b.ResetTimer()
	for range b.N {
		fmt.Printf("\nKey limits, one work process (concurrency %d, no-op handler), %d tasks over %d keys per pass, %s, GOMAXPROCS=%d\n",
			conc, n, keys, rs.what, runtime.GOMAXPROCS(0))
		rates := map[string][]float64{}
		redisUS := map[string][]float64{}
		procUS := map[string][]float64{}
		for r := range rounds {
			for i := range modes {
				// ABBA: odd rounds run the passes in the reverse order, so
				// that a drift of the host's speed over a round (this VM's
				// rate moves by a tenth within seconds) weighs on both
				// sides of a ratio alike over two rounds; the per-key pass,
				// the ratio that matters, is always next to the no-rule one
				m := modes[i]
				if r%2 == 1 {
					m = modes[len(modes)-1-i]
				}
				var lim worker.Limiter
				if m.typ != "noop" {
					lim = live
				}
				cs0 := rs.commandStats(b)
				cpu0, pcpu0 := rs.cpu(b), testenv.ProcessCPU()
				var rate float64
				pprof.Do(b.Context(), pprof.Labels("mode", m.typ), func(context.Context) {
					rate = workerConsumeWith(b, k.Brokers, rdb, ns, fmt.Sprintf("bench.%s.%d", m.typ, r), n, conc, lim)
				})
				ru := float64((rs.cpu(b) - cpu0).Nanoseconds()) / 1000 / float64(n)
				pu := float64((testenv.ProcessCPU() - pcpu0).Nanoseconds()) / 1000 / float64(n)
				rates[m.name] = append(rates[m.name], rate)
				redisUS[m.name] = append(redisUS[m.name], ru)
				procUS[m.name] = append(procUS[m.name], pu)
				fmt.Printf("  round %d, %-8s: %7.0f tasks/s; CPU per task: redis-server %.2fus, worker+kfake %.2fus\n", r+1, m.name, rate, ru, pu)
				if r == rounds-1 {
					fmt.Printf("      redis-server per task, by command (INFO commandstats; evalsha includes what its scripts call): %s\n",
						testenv.CommandStatsDelta(cs0, rs.commandStats(b), n))
				}
			}
		}
		base := rates["no rule"]
		for _, m := range modes[1:] {
			var ratios []float64
			for r := range rounds {
				ratios = append(ratios, rates[m.name][r]/base[r])
			}
			slices.Sort(ratios)
			// the same comparison by CPU: what a no-rule task costs the
			// machine (redis-server and this process) over what a task
			// with the rule costs it, per round; on a machine that the
			// two saturate, the rate ratio it would reach
			var cpuRatios []float64
			for r := range rounds {
				cpuRatios = append(cpuRatios, (redisUS["no rule"][r]+procUS["no rule"][r])/(redisUS[m.name][r]+procUS[m.name][r]))
			}
			slices.Sort(cpuRatios)
			fmt.Printf("  %-8s: median %.0f tasks/s = %.0f%% of no rule (per round %.0f%%..%.0f%%); redis-server %+.2fus per task (median), worker+kfake %+.2fus; CPU per no-rule task / per task with the rule %.0f%% (%.0f%%..%.0f%%)\n",
				m.name, testenv.Median(rates[m.name]), 100*testenv.Median(ratios), 100*ratios[0], 100*ratios[len(ratios)-1],
				testenv.Median(redisUS[m.name])-testenv.Median(redisUS["no rule"]), testenv.Median(procUS[m.name])-testenv.Median(procUS["no rule"]),
				100*testenv.Median(cpuRatios), 100*cpuRatios[0], 100*cpuRatios[len(cpuRatios)-1])
			b.ReportMetric(100*testenv.Median(ratios), "pct-of-no-rule-"+m.typ)
		}
		b.ReportMetric(testenv.Median(base), "no-rule-tasks/s")

		count := func() (int, int64) {
			var nkeys int
			var fields int64
			iter := rdb.Scan(b.Context(), 0, "dq:{"+ns+":rl:keyed}*", 1000).Iterator()
			for iter.Next(b.Context()) {
				nkeys++
				switch rdb.Type(b.Context(), iter.Val()).Val() {
				case "hash":
					fields += rdb.HLen(b.Context(), iter.Val()).Val()
				case "zset":
					fields += rdb.ZCard(b.Context(), iter.Val()).Val()
				}
			}
			if err := iter.Err(); err != nil {
				b.Fatal(err)
			}
			return nkeys, fields
		}
		nk, nf := count()
		fmt.Printf("  per-key state of the keyed type right after: %d Redis keys (hash fields and zset members %d)\n", nk, nf)
		if os.Getenv("DQ_BENCH_IDLE_WAIT") != "0" {
			wait := 80 * time.Second // the limiter's idle horizon: 1 minute at least, plus a quarter
			time.Sleep(wait)
			nk, nf = count()
			fmt.Printf("  the same after the keys were idle for %v: %d Redis keys (hash fields and zset members %d)\n", wait, nk, nf)
			if nk != 0 {
				b.Errorf("per-key state left after the keys went idle: %d keys", nk)
			}
		}
	}
}
