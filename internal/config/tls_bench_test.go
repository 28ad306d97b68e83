package config_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/config"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// BenchmarkRedisTLS schedules the same tasks through the store next to
// each other in one run: over plain TCP with the default user, and over
// TLS with a client certificate as an ACL user with the least-privilege
// rules (what a managed Redis with in-transit encryption costs). It
// prints tasks/s and redis-server CPU per task for each, and their
// ratio. DQ_BENCH_TASKS sets the task count (default 100,000).
//
//	go test ./internal/config -run '^$' -bench BenchmarkRedisTLS -benchtime 1x
func BenchmarkRedisTLS(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("DQ_BENCH_TASKS")); err == nil && v > 0 {
		n = v
	}
	const batch, conc = 500, 8
	pki := testenv.NewPKI(b)
	plain := testenv.StartRedis(b)
	secured := testenv.StartRedis(b, testenv.RedisOptions{TLS: pki, Users: []testenv.RedisUser{{Name: "dq", Password: "pw", Rules: []string{"~*", "&*", "+@all"}}}})
	pc := config.Common{RedisAddrs: []string{plain.Addr}}
	sc := config.Common{RedisAddrs: []string{secured.Addr}, RedisUsername: "dq", RedisPassword: "pw"}
	sc.RedisTLS.CA, sc.RedisTLS.Cert, sc.RedisTLS.Key = pki.Client.CA, pki.Client.Cert, pki.Client.Key
	type result struct {
		rate, cpuPerTask float64
	}
	run := func(name string, c config.Common, round int) result {
		rdb, err := c.RedisClient()
		if err != nil {
			b.Fatal(err)
		}
		defer rdb.Close()
		s, err := redisstore.New(b.Context(), rdb, redisstore.Options{Namespace: fmt.Sprintf("bench%d", round), Shards: 16, Retention: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		due := time.Now().Add(time.Hour)
		cpu0 := testenv.RedisCPU(b, rdb)
		start := time.Now()
		work := make(chan int)
		errs := make(chan error, conc)
		for range conc {
			go func() {
				for from := range work {
					subs := make([]redisstore.Submit, 0, batch)
					for i := from; i < min(from+batch, n); i++ {
						subs = append(subs, redisstore.Submit{Task: &task.Task{ID: name + "-" + strconv.Itoa(i), Type: "bench",
							Payload: []byte(`{"order":123,"action":"cancel"}`), PayloadJSON: true, DueAt: due}})
					}
					if _, err := s.Schedule(b.Context(), subs); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for i := 0; i < n; i += batch {
			work <- i
		}
		close(work)
		for range conc {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		el := time.Since(start)
		cpu := testenv.RedisCPU(b, rdb) - cpu0
		return result{rate: float64(n) / el.Seconds(), cpuPerTask: float64(cpu.Microseconds()) / float64(n)}
	}
	b.Logf("method: %d tasks scheduled through redisstore.Schedule in batches of %d from %d goroutines, 16 shards; "+
		"plain = TCP, default user; tls = TLS 1.3 with a client certificate, ACL user; the two alternate, 3 rounds each, same run", n, batch, conc)
	for range b.N {
		for round := range 3 {
			p := run("plain", pc, round)
			t := run("tls", sc, round)
			b.Logf("round %d: plain %.0f tasks/s, redis %.2f µs/task | tls %.0f tasks/s, redis %.2f µs/task | tls/plain rate %.2f, redis CPU %.2f",
				round+1, p.rate, p.cpuPerTask, t.rate, t.cpuPerTask, t.rate/p.rate, t.cpuPerTask/p.cpuPerTask)
			b.ReportMetric(t.rate/p.rate, "tls/plain-rate")
		}
	}
}
