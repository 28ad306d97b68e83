package redisstore

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkSettleReceipts measures the Redis CPU the fire receipts and the
// delivered state add to the fire path (issue #41). Per batch size (500:
// a burst; 10: a trickle), one iteration runs the three settles below in
// turn, each on a fresh redis-server with 100,000 tasks due now (16
// shards, 36-byte ids, 100-byte payload): every task taken (round robin
// over the shards, as 16 pollers take), then every take settled in the
// same order:
//
//	settle     Settle, no acks: the path before receipts (O(1) per take)
//	worked     SettleAcks, every copy acknowledged to a worked topic: one
//	           receipt per task (HSET per 500)
//	delivered  SettleAcks, every copy to a topic no worker handles: the
//	           same receipts (kind 'd'); per take, the lease key copied
//	           to the take's purge list and one ZADD into the shard's
//	           delivered index (nothing per task besides the receipt)
//
// redis-server's own CPU (INFO cpu, used_cpu_user + used_cpu_sys) is read
// around the takes and around the settles; the settles' script time (INFO
// commandstats, evalsha usec) is logged next to it. The extra of worked
// and delivered is their settles' CPU less that of the plain settles of
// the same iteration (the takes are the same in all three: their
// differences are noise): the three run within seconds of each other, so
// a drift of the machine's speed spreads the pairs less than the figures.
//
//	go test ./internal/redisstore -run '^$' -bench BenchmarkSettleReceipts -benchtime 1x -count 5
func BenchmarkSettleReceipts(b *testing.B) {
	for _, batch := range []int{500, 10} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			for range b.N {
				settles := map[string]float64{}
				for _, mode := range []string{"settle", "worked", "delivered"} {
					take, settle := benchSettleReceipts(b, batch, mode)
					settles[mode] = settle
					b.ReportMetric(take+settle, mode+"-us/task")
					b.ReportMetric(settle, mode+"-settle-us/task")
				}
				b.ReportMetric(settles["worked"]-settles["settle"], "worked-extra-us/task")
				b.ReportMetric(settles["delivered"]-settles["settle"], "delivered-extra-us/task")
			}
		})
	}
}

// benchSettleReceipts takes and settles 100,000 tasks (mode: settle,
// worked or delivered) and returns redis-server's CPU per task of the
// takes and of the settles, in microseconds.
func benchSettleReceipts(b *testing.B, batch int, mode string) (takeUS, settleUS float64) {
	const n, shards = 100_000, 16
	r := testenv.StartRedis(b)
	rdb := r.Client(b)
	ctx := b.Context()
	s, err := New(ctx, rdb, Options{Namespace: "rcpt", Shards: shards})
	if err != nil {
		b.Fatal(err)
	}
	scheduleBench(b, s, n, time.Now().Add(-time.Second))
	type took struct {
		shard int
		t     Taken
	}
	var all []took
	cpu0 := testenv.RedisCPU(b, rdb)
	taken := 0
	empty := make([]bool, shards)
	for left := shards; left > 0; {
		for sh := range shards {
			if empty[sh] {
				continue
			}
			t, err := s.Take(ctx, sh, 1, batch, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			if len(t.Tasks) == 0 {
				empty[sh] = true
				left--
				continue
			}
			all = append(all, took{sh, t})
			taken += len(t.Tasks)
		}
	}
	cpu1, cs1 := testenv.RedisCPU(b, rdb), testenv.CommandStats(b, rdb)
	fired, delivered := 0, 0
	firedAt := time.Now()
	for k, t := range all {
		if mode == "settle" {
			f, _, err := s.Settle(ctx, t.shard, 1, t.t.Lease, nil)
			if err != nil {
				b.Fatal(err)
			}
			fired += f
			continue
		}
		acks := make([]Ack, len(t.t.Tasks))
		for i, tk := range t.t.Tasks {
			acks[i] = Ack{ID: tk.ID, Gen: tk.Gen, Attempt: max(tk.Attempt, 1), DueAt: tk.DueAt, FiredAt: firedAt,
				Partition: int32(k % 4), Offset: int64(k*batch + i), Token: 1, Delivered: mode == "delivered"}
		}
		res, err := s.SettleAcks(ctx, t.shard, 1, t.t.Lease, nil, acks)
		if err != nil {
			b.Fatal(err)
		}
		fired += res.Fired
		if res.Stored && mode == "delivered" {
			delivered += len(acks)
		}
	}
	cpu2, cs2 := testenv.RedisCPU(b, rdb), testenv.CommandStats(b, rdb)
	if taken != n || fired != n {
		b.Fatalf("took %d, settled %d of %d", taken, fired, n)
	}
	if want := map[string]int{"delivered": n}[mode]; delivered != want {
		b.Fatalf("%d delivered, want %d", delivered, want)
	}
	var rcpts, done, lists int64
	for sh := range shards {
		rcpts += rdb.HLen(ctx, s.k.receipts(sh)).Val()
		done += rdb.ZCard(ctx, s.k.done(sh)).Val()
		lists += rdb.ZCard(ctx, s.k.delivered(sh)).Val()
	}
	if want := map[string]int64{"worked": n, "delivered": n}[mode]; rcpts != want {
		b.Fatalf("%d receipts stored, want %d", rcpts, want)
	}
	if want := map[string]int64{"delivered": int64(len(all))}[mode]; done != 0 || lists != want {
		b.Fatalf("%d tasks in the done sets, %d purge lists, want 0 and %d", done, lists, want)
	}
	takeUS = float64((cpu1 - cpu0).Microseconds()) / n
	settleUS = float64((cpu2 - cpu1).Microseconds()) / n
	scriptUS := float64(cs2["evalsha"].Usec-cs1["evalsha"].Usec) / n
	b.Logf("%s: %d tasks due now, 16 shards, takes of %d round robin, then the settles; redis-server CPU (INFO cpu) per task: take %.2f us, settle %.2f us, total %.2f us; settle script time (commandstats evalsha) %.2f us/task; settles by command: %s",
		mode, n, batch, takeUS, settleUS, takeUS+settleUS, scriptUS, testenv.CommandStatsDelta(cs1, cs2, n))
	return takeUS, settleUS
}

// BenchmarkBridgeMemory follows Redis memory through a bridge-only
// workload (issue #41): 1,000,000 tasks (DQ_BENCH_TASKS; 16 shards,
// 36-byte ids, 100-byte payload, due now) scheduled in calls of 1000,
// taken 500 at a time by 16 goroutines and settled delivered (SettleAcks,
// every copy to a topic no worker handles), retention 10s
// (DQ_BENCH_RETENTION; a drain longer than it purges as it goes). Once the
// retention ended, every shard is taken as its poller takes an idle shard
// (a take purges on every 8th call, and again within PurgeAgain while its
// purge was full; otherwise the next take comes after the idle poll,
// DQ_BENCH_IDLE_POLL, default the event process' 5s) until its receipts
// and its delivered index (the purge lists) are empty. It prints INFO
// memory used_memory before scheduling (the scripts loaded), after
// scheduling, at the drain's end, its peak (sampled every 50ms during
// the drain), after the purge (and
// again without the workload's connections and the slow log, both bounded
// whatever the task count), how long after the retention the purge ended,
// and, when memory did not return to within 3% of the baseline, what
// holds it (the keys, their MEMORY USAGE and encodings, MEMORY STATS).
//
//	go test ./internal/redisstore -run '^$' -bench BenchmarkBridgeMemory -benchtime 1x -timeout 30m
func BenchmarkBridgeMemory(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("DQ_BENCH_TASKS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	idle := 5 * time.Second
	if v := os.Getenv("DQ_BENCH_IDLE_POLL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		idle = d
	}
	const shards, batch = 16, 500
	retention := 10 * time.Second
	if v := os.Getenv("DQ_BENCH_RETENTION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		retention = d
	}
	for range b.N {
		r := testenv.StartRedis(b)
		rdb := r.Client(b) // the workload's
		mc := r.Client(b)  // the measurements'
		ctx := b.Context()
		// every script loaded before the baseline, on a namespace of its
		// own that stays as it is (one task, delivered)
		warm, err := New(ctx, rdb, Options{Namespace: "warm", Shards: 1, Retention: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		scheduleBench(b, warm, 1, time.Now().Add(-time.Second))
		bridgeDrain(b, warm, 1, 1)
		s, err := New(ctx, rdb, Options{Namespace: "bridge", Shards: shards, Retention: retention})
		if err != nil {
			b.Fatal(err)
		}
		for sh := range shards { // the shards' take counters: as a running poller's
			if _, err := s.Take(ctx, sh, 1, batch, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		m0 := memInfo(b, mc)

		t0 := time.Now()
		scheduleBench(b, s, n, time.Now().Add(-time.Second))
		m1 := memInfo(b, mc)
		schedDur := time.Since(t0)

		// a drain longer than the retention purges as it goes: the peak is
		// sampled (INFO memory every 50ms) as well as read at the end
		t1 := time.Now()
		cpu0 := testenv.RedisCPU(b, rdb)
		stopPeak, peak := samplePeak(ctx, mc)
		lastSettle := bridgeDrain(b, s, shards, batch)
		drainCPU := testenv.RedisCPU(b, rdb) - cpu0
		drainDur := time.Since(t1)
		m2 := memInfo(b, mc)
		stopPeak()
		dl, rcpt := bridgeLeft(b, s, shards)
		ended := lastSettle.Add(retention) // Redis' clock: every expiry is <= this
		fmt.Printf("  drain: %d tasks taken and settled delivered in %v; redis-server CPU %.2f us/task; at its end %d delivered (receipts of kind d), %d receipts (the rest purged already); retention ends %v after the last settle\n",
			n, drainDur.Round(time.Millisecond), float64(drainCPU.Microseconds())/float64(n), dl, rcpt, retention)
		fmt.Printf("  peak used_memory sampled during the drain: %d bytes\n", max(*peak, m2.used))

		// the pollers of an idle bridge: a take per IdlePoll, PurgeAgain
		// while the purge was full
		var wg sync.WaitGroup
		cleared, first := make([]time.Time, shards), make([]time.Time, shards)
		takes := make([]int, shards)
		var cpu1 time.Duration
		waitUntil(ctx, ended)
		cpu1 = testenv.RedisCPU(b, rdb)
		for sh := range shards {
			wg.Go(func() {
				held := rdb.HLen(ctx, s.k.receipts(sh)).Val()
				for ctx.Err() == nil {
					t, err := s.Take(ctx, sh, 1, batch, time.Minute)
					if err != nil {
						b.Error(err)
						return
					}
					takes[sh]++
					if len(t.Tasks) > 0 {
						b.Errorf("shard %d: a take after the drain took %d tasks", sh, len(t.Tasks))
						return
					}
					left := rdb.HLen(ctx, s.k.receipts(sh)).Val()
					if left < held && first[sh].IsZero() {
						first[sh] = time.Now() // this shard's first purge
					}
					if left == 0 && rdb.ZCard(ctx, s.k.delivered(sh)).Val() == 0 {
						cleared[sh] = time.Now()
						return
					}
					d := idle
					if t.PurgeMore {
						d = PurgeAgain
					}
					sleepCtx(ctx, d)
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			return
		}
		purgeCPU := testenv.RedisCPU(b, rdb) - cpu1
		var last, firstLast time.Time
		total := 0
		for sh := range shards {
			if cleared[sh].After(last) {
				last = cleared[sh]
			}
			if first[sh].After(firstLast) {
				firstLast = first[sh]
			}
			total += takes[sh]
		}
		purgeDur := last.Sub(ended)
		// the server's cron resizes the emptied key space and frees idle
		// clients' buffers: read after one more second
		sleepCtx(ctx, time.Second)
		m3 := memInfo(b, mc)
		// what the workload's connections (their buffers) and the slow log
		// (at most 128 entries of up to 32 arguments each: the settles'
		// long argument lists) hold, both bounded whatever the task count
		_ = rdb.Close()
		if err := mc.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
			b.Fatal(err)
		}
		sleepCtx(ctx, time.Second)
		m4 := memInfo(b, mc)

		fmt.Printf("  %-46s %12s %12s %12s %12s %8s %8s\n", "INFO memory", "used_memory", "dataset", "clients", "scripts", "keys", "slowlog")
		for _, row := range []struct {
			name string
			m    memStats
		}{
			{"before scheduling (scripts loaded)", m0},
			{fmt.Sprintf("after scheduling %d (%v)", n, schedDur.Round(time.Second)), m1},
			{"after the drain, all delivered", m2},
			{"after the retention and the purge", m3},
			{"  and the workload's clients closed, SLOWLOG RESET", m4},
		} {
			fmt.Printf("  %-46s %12d %12d %12d %12d %8d %8d\n", row.name, row.m.used, row.m.dataset, row.m.clients, row.m.scripts, row.m.keys, row.m.slowlog)
		}
		fmt.Printf("  purge: receipts and purge lists empty %v after the retention ended; the last shard's first purge came %v after it (a take purges on every %dth call: up to %d idle polls); %d takes over 16 shards (idle poll %v, PurgeAgain %v); redis-server CPU of those takes %.2f us per purged task (%d purged)\n",
			purgeDur.Round(time.Millisecond), firstLast.Sub(ended).Round(time.Millisecond), purgeEvery, purgeEvery, total, idle, PurgeAgain, float64(purgeCPU.Microseconds())/float64(max(dl, 1)), dl)
		perPending := float64(m1.used-m0.used) / float64(n)
		perDelivered := float64(m2.used-m0.used) / float64(max(dl, 1))
		left, clean := m3.used-m0.used, m4.used-m0.used
		fmt.Printf("  per task: %.0f bytes pending, %.0f bytes delivered (record + receipt + purge list); after the purge %+d bytes (%+.2f%% of the baseline), %+d bytes (%+.2f%%) without the clients and the slow log\n",
			perPending, perDelivered, left, 100*float64(left)/float64(m0.used), clean, 100*float64(clean)/float64(m0.used))
		b.ReportMetric(float64(m0.used), "base-bytes")
		b.ReportMetric(float64(m1.used), "scheduled-bytes")
		b.ReportMetric(float64(max(*peak, m2.used)), "peak-bytes")
		b.ReportMetric(float64(m3.used), "purged-bytes")
		b.ReportMetric(float64(m4.used), "purged-clean-bytes")
		b.ReportMetric(purgeDur.Seconds(), "purge-s")
		if float64(clean) > 0.03*float64(m0.used) {
			fmt.Printf("  memory did not return to the baseline; what is left:\n")
			reportKeys(b, mc)
			fmt.Printf("    MEMORY STATS, baseline -> now:\n")
			for _, k := range slices.Sorted(maps.Keys(m4.stats)) {
				if m4.stats[k] != m0.stats[k] {
					fmt.Printf("      %-36s %12d -> %12d (%+d)\n", k, m0.stats[k], m4.stats[k], m4.stats[k]-m0.stats[k])
				}
			}
		}
	}
}

// bridgeDrain takes every due task of s, batch per take, and settles
// every take delivered; it returns Redis' clock at the last settle (an
// upper bound of every expiry it wrote, less the retention).
func bridgeDrain(b *testing.B, s *Store, shards, batch int) time.Time {
	ctx := b.Context()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Time
	for sh := range shards {
		wg.Go(func() {
			for k := 0; ; k++ {
				t, err := s.Take(ctx, sh, 1, batch, time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				if len(t.Tasks) == 0 {
					return
				}
				acks := make([]Ack, len(t.Tasks))
				for i, tk := range t.Tasks {
					acks[i] = Ack{ID: tk.ID, Gen: tk.Gen, Attempt: max(tk.Attempt, 1), DueAt: tk.DueAt, FiredAt: t.Now,
						Partition: int32(sh % 4), Offset: int64(k*batch + i), Token: 1, Delivered: true}
				}
				res, err := s.SettleAcks(ctx, sh, 1, t.Lease, nil, acks)
				if err != nil {
					b.Error(err)
					return
				}
				if !res.Stored {
					b.Errorf("shard %d: a settle stored nothing", sh)
					return
				}
				now, err := s.rdb.Time(ctx).Result()
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				if now.After(last) {
					last = now
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return last
}

// samplePeak reads INFO memory used_memory every 50ms until stop; *peak
// is the highest it read.
func samplePeak(ctx context.Context, rdb *redis.Client) (stop func(), peak *int64) {
	peak = new(int64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			info, err := rdb.Info(ctx, "memory").Result()
			if err != nil {
				continue
			}
			for line := range strings.SplitSeq(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
					x, _ := strconv.ParseInt(v, 10, 64)
					*peak = max(*peak, x)
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }, peak
}

// bridgeLeft counts the delivered tasks (their receipts of kind 'd') and
// the receipts of s.
func bridgeLeft(b *testing.B, s *Store, shards int) (delivered, rcpt int64) {
	for sh := range shards {
		rs := s.rdb.HVals(b.Context(), s.k.receipts(sh)).Val()
		rcpt += int64(len(rs))
		for _, r := range rs {
			if len(r) > 0 && r[0] == receiptDelivered {
				delivered++
			}
		}
	}
	return delivered, rcpt
}

// memStats is a few fields of INFO memory and the key count.
type memStats struct {
	used, dataset, clients, scripts, keys, slowlog int64
	stats                                          map[string]int64 // MEMORY STATS, db.0 flattened
}

func memInfo(tb testing.TB, rdb *redis.Client) memStats {
	tb.Helper()
	info, err := rdb.Info(tb.Context(), "memory").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var m memStats
	for line := range strings.SplitSeq(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		x, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "used_memory":
			m.used = x
		case "used_memory_dataset":
			m.dataset = x
		case "mem_clients_normal":
			m.clients = x
		case "used_memory_scripts":
			m.scripts = x
		}
	}
	m.keys = rdb.DBSize(tb.Context()).Val()
	m.slowlog, _ = rdb.Do(tb.Context(), "SLOWLOG", "LEN").Val().(int64)
	m.stats = map[string]int64{}
	var flatten func(prefix string, v any)
	flatten = func(prefix string, v any) {
		switch x := v.(type) {
		case []any:
			for i := 0; i+1 < len(x); i += 2 {
				k, _ := x[i].(string)
				flatten(prefix+k+".", x[i+1])
			}
		case map[any]any:
			for k, v := range x {
				flatten(fmt.Sprint(prefix, k, "."), v)
			}
		case int64:
			m.stats[strings.TrimSuffix(prefix, ".")] = x
		}
	}
	flatten("", rdb.Do(tb.Context(), "MEMORY", "STATS").Val())
	return m
}

// reportKeys prints every key of the bridge namespace with its type,
// encoding, length and MEMORY USAGE (the 40 largest).
func reportKeys(tb testing.TB, rdb *redis.Client) {
	ctx := tb.Context()
	type row struct {
		key, typ, enc string
		bytes         int64
	}
	var rows []row
	iter := rdb.Scan(ctx, 0, "dq:{bridge:*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		rows = append(rows, row{k, rdb.Type(ctx, k).Val(), rdb.ObjectEncoding(ctx, k).Val(), rdb.MemoryUsage(ctx, k, 0).Val()})
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
	var sum int64
	for _, r := range rows {
		sum += r.bytes
	}
	fmt.Printf("    %d keys of the namespace, %d bytes by MEMORY USAGE\n", len(rows), sum)
	for i, r := range rows {
		if i == 40 {
			break
		}
		fmt.Printf("    %-40s %-6s %-10s %d bytes\n", r.key, r.typ, r.enc, r.bytes)
	}
	info, _ := rdb.Info(ctx, "memory").Result()
	fmt.Printf("    INFO memory:\n%s\n", info)
}

func waitUntil(ctx context.Context, t time.Time) { sleepCtx(ctx, time.Until(t)) }

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
