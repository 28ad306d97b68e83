package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkWrite measures the daemon's write path end to end:
//
//	go test -run '^$' -bench BenchmarkWrite -benchtime 5s ./internal/daemon/
//
// Each sub-benchmark prints its method. The daemon runs in-process behind
// a real loopback listener; Redis is a redis-server child (testenv's
// settings: no persistence, listpack hashes up to 512-byte values); the
// load generator runs in the same process, so all three share the
// machine's cores.
//
// Besides tasks/s (wall clock, so it depends on what else runs on the
// machine) the throughput runs report CPU per task: redis-µs/task from
// redis-server's INFO cpu (used_cpu_user + used_cpu_sys) and go-µs/task
// from this process' rusage (the daemon and the load generator). Redis
// runs scripts on one thread, so 1e6 / redis-µs/task bounds what any
// daemon can reach on that Redis.
func BenchmarkWrite(b *testing.B) {
	r := testenv.StartRedis(b)
	cfg := testConfig(b, r.Addr)
	cfg.MaxBody = 4 << 20
	app := startBenchApp(b, cfg)
	rdb := r.Client(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	b.Cleanup(hc.CloseIdleConnections)

	b.Run("batch", func(b *testing.B) {
		const size, senders = 1000, 4
		describe(b, "batch: POST /v1/tasks/batch of %d tasks (36-char UUID ids, 64-byte JSON payload, delay 1h), %d concurrent senders over loopback HTTP/1.1, bodies built before the timer", size, senders)
		bodies := make([][]byte, b.N)
		for i := range bodies {
			bodies[i] = batchBody(size)
		}
		b.ResetTimer()
		done := measure(b, rdb, b.N*size)
		run(b, senders, b.N, func(i int) { post(b, hc, app.base+"/v1/tasks/batch", bodies[i], http.StatusOK) })
		done()
	})

	b.Run("store-direct", func(b *testing.B) {
		const size, senders = 1000, 4
		describe(b, "baseline without HTTP and JSON: redisstore.Schedule of %d tasks per call (same tasks as batch), %d concurrent callers, same redis-server: what the batch API costs on top of the store", size, senders)
		st := openStore(b, rdb, cfg)
		subs := make([][]redisstore.Submit, b.N)
		for i := range subs {
			subs[i] = make([]redisstore.Submit, size)
			for j := range subs[i] {
				sub, e := wire.DecodeTask(taskBody(), time.Now())
				if e != nil {
					b.Fatal(e)
				}
				subs[i][j] = sub
			}
		}
		b.ResetTimer()
		done := measure(b, rdb, b.N*size)
		run(b, senders, b.N, func(i int) {
			if _, err := st.Schedule(b.Context(), subs[i]); err != nil {
				b.Error(err)
			}
		})
		done()
	})

	b.Run("single16", func(b *testing.B) {
		const clients = 16
		describe(b, "single: POST /v1/tasks, one task per request (36-char UUID ids, 64-byte JSON payload, delay 1h), %d concurrent clients with keep-alive over loopback", clients)
		bodies := make([][]byte, b.N)
		for i := range bodies {
			bodies[i] = taskBody()
		}
		b.ResetTimer()
		done := measure(b, rdb, b.N)
		run(b, clients, b.N, func(i int) { post(b, hc, app.base+"/v1/tasks", bodies[i], http.StatusCreated) })
		done()
	})

	b.Run("memory", func(b *testing.B) {
		const tasks, size = 200_000, 1000
		describe(b, "memory: a fresh redis-server; INFO memory used_memory before and after scheduling %d tasks (36-char UUID ids, 64-byte JSON payload, type \"bench\", delay 1h) through the batch API: bytes/task = delta / tasks, including the namespace's fixed keys (16 shards x %d bucket hashes); then %d more: marginal-bytes/task", tasks, redisstore.BucketsPerShard, tasks)
		for range b.N {
			b.StopTimer()
			mr := testenv.StartRedis(b)
			mcfg := testConfig(b, mr.Addr)
			mcfg.MaxBody = 4 << 20
			mapp := startBenchApp(b, mcfg)
			mrdb := mr.Client(b)
			schedule := func() {
				bodies := make([][]byte, tasks/size)
				for i := range bodies {
					bodies[i] = batchBody(size)
				}
				b.StartTimer()
				run(b, 4, len(bodies), func(i int) { post(b, hc, mapp.base+"/v1/tasks/batch", bodies[i], http.StatusOK) })
				b.StopTimer()
			}
			m0 := usedMemory(b, mrdb.Info(b.Context(), "memory").Val())
			schedule()
			m1 := usedMemory(b, mrdb.Info(b.Context(), "memory").Val())
			schedule()
			m2 := usedMemory(b, mrdb.Info(b.Context(), "memory").Val())
			if n := mrdb.HLen(b.Context(), "dq:{"+mcfg.Namespace+"}:meta").Val(); n == 0 {
				b.Fatal("namespace not created")
			}
			b.ReportMetric(float64(m1-m0)/tasks, "bytes/task")
			b.ReportMetric(float64(m2-m1)/tasks, "marginal-bytes/task")
			mapp.stop()
			mr.Kill(b)
			b.StartTimer()
		}
	})
}

var described sync.Map

func describe(b *testing.B, format string, args ...any) {
	if _, done := described.LoadOrStore(b.Name(), true); !done {
		fmt.Printf("# %s: "+format+"\n", append([]any{b.Name()}, args...)...)
	}
}

// startBenchApp runs a daemon that logs only errors.
func startBenchApp(b *testing.B, cfg Config) *testApp {
	b.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{b}, &slog.HandlerOptions{Level: slog.LevelError}))
	app, err := New(b.Context(), cfg, log)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(b.Context()))
	ta := &testApp{App: app, t: b, base: "http://" + app.Addr(), cancel: cancel, done: make(chan error, 1)}
	go func() { ta.done <- app.Run(ctx) }()
	b.Cleanup(ta.stop)
	return ta
}

// run calls fn(0..n-1) from workers goroutines.
func run(b *testing.B, workers, n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || b.Failed() {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

var payload64 = `"` + strings.Repeat("p", 62) + `"` // 64 bytes of JSON

func taskBody() []byte {
	return []byte(`{"id":"` + uuid.NewString() + `","type":"bench","payload":` + payload64 + `,"delay":"1h"}`)
}

func batchBody(n int) []byte {
	var buf bytes.Buffer
	buf.Grow(n * 130)
	buf.WriteString(`{"tasks":[`)
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(taskBody())
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// BenchmarkDecodeBatch is the daemon's CPU per task for decoding a
// 1000-task batch body (envelope, items, validation), without HTTP or Redis.
func BenchmarkDecodeBatch(b *testing.B) {
	body := batchBody(1000)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		items, e := wire.DecodeBatch(body, 1000)
		if e != nil {
			b.Fatal(e)
		}
		for _, it := range items {
			if _, e := wire.DecodeTask(it, fuzzNow); e != nil {
				b.Fatal(e)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/task")
}

func post(b *testing.B, hc *http.Client, url string, body []byte, want int) {
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Error(err)
		return
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		b.Errorf("%s: %d %.300s", url, resp.StatusCode, out)
		return
	}
	if bytes.Contains(out, []byte(`"error"`)) || bytes.Contains(out, []byte(`journaled`)) {
		b.Errorf("%s: not every task was scheduled: %.300s", url, out)
	}
}

func usedMemory(b *testing.B, info string) int64 {
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no used_memory in %q", info)
	return 0
}

// measure starts the clock and the CPU counters for tasks tasks; the
// returned func reports tasks/s, redis-µs/task and go-µs/task.
func measure(b *testing.B, rdb *redis.Client, tasks int) func() {
	redis0 := testenv.RedisCPU(b, rdb)
	self0 := selfCPU()
	start := time.Now()
	return func() {
		el := time.Since(start)
		b.ReportMetric(float64(tasks)/el.Seconds(), "tasks/s")
		b.ReportMetric((testenv.RedisCPU(b, rdb)-redis0).Seconds()*1e6/float64(tasks), "redis-µs/task")
		b.ReportMetric((selfCPU()-self0).Seconds()*1e6/float64(tasks), "go-µs/task")
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
