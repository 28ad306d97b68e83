package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/bench/internal/tbenv"
	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/testenv"
)

// Topics: the handled and lag tasks go to tasksTopic, which the work
// processes consume; the burst goes to burstTopic, which only the bench's
// own consumer reads (a fired task nobody finishes stays fired: nothing
// fires it again).
const (
	tasksTopic  = "dq.tasks"
	burstTopic  = "scale.burst"
	deadTopic   = "dq.dead"
	outTopic    = "dq.outcomes"
	namespace   = "scale"
	workerGroup = "scale-work"
)

// env is one k: a Redis Cluster of k masters, etcd, kfake, the delayq
// processes, the webhook endpoint and the Kafka consumer.
type env struct {
	scope   *tbenv.TB
	k       int
	shards  int
	cluster *testenv.RedisCluster
	nodes   []*redis.Client // one per master, for INFO
	kafka   *testenv.Kafka
	broker  *broker      // the kfake child process (broker.go)
	hc      *http.Client // probes and /metrics
	api     []*client.Client
	daemons []*proc
	events  []*proc
	workers []*proc

	hook     *tap // webhook calls
	consumer *tap // records the bench's consumer read
	hookURL  string

	shardsPerMaster []int
	ranges          [][2]int // the slots of master i (testenv.KeySlotRanges)
	nsMaster        int      // the master of the namespace-wide keys {<ns>}
}

// procCounts are the process counts of one k.
type procCounts struct{ daemons, events, workers int }

// startEnv builds the whole system for k masters; everything stops when
// scope closes.
// With profile, process 0 of each kind serves its runtime profiles
// (DQ_PPROF_ADDR; remoteProfiles reads them).
func startEnv(scope *tbenv.TB, bin string, k, shards, partitions int, pc procCounts, workConc int, roleEnv map[string]map[string]string, profile bool) *env {
	e := &env{
		scope: scope, k: k, shards: shards,
		hc:       &http.Client{Timeout: 5 * time.Second},
		hook:     &tap{},
		consumer: &tap{},
	}
	t0 := time.Now()
	// slots split so that every master serves as many shards (even slot
	// ranges would not: 128 shard tags over 8 masters fall 24-25 on some
	// and 7-8 on others)
	tags := make([]string, shards)
	for s := range tags {
		tags[s] = "{" + namespace + ":" + strconv.Itoa(s) + "}"
	}
	e.ranges = testenv.KeySlotRanges(k, tags)
	e.cluster = testenv.StartRedisClusterRanges(scope, e.ranges)
	for _, n := range e.cluster.Nodes {
		e.nodes = append(e.nodes, n.Client(scope))
	}
	e.mapShards()
	etcd := testenv.StartEtcd(scope)
	e.broker, e.kafka = startBroker(scope, partitions, tasksTopic, burstTopic, deadTopic, outTopic)
	e.startConsumer()
	e.startWebhook()
	infra := time.Since(t0)

	common := map[string]string{
		"DQ_NAMESPACE":        namespace,
		"DQ_REDIS_ADDRS":      strings.Join(e.cluster.Addrs, ","),
		"DQ_SHARDS":           strconv.Itoa(shards),
		"DQ_ETCD_ENDPOINTS":   strings.Join(etcd.Endpoints, ","),
		"DQ_KAFKA_BROKERS":    strings.Join(e.kafka.Brokers, ","),
		"DQ_LOG_LEVEL":        "warn",
		"DQ_LOG_FORMAT":       "text",
		"DQ_SHUTDOWN_TIMEOUT": "5s",
	}
	// with is the environment of process i of a kind (-env's last)
	with := func(i int, kind string, extra map[string]string) (string, map[string]string) {
		addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(scope))
		m := map[string]string{"DQ_HTTP_ADDR": addr}
		if profile && i == 0 {
			m["DQ_PPROF_ADDR"] = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(scope))
		}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		for k, v := range roleEnv[kind] {
			m[k] = v
		}
		for k, v := range roleEnv[kind+strconv.Itoa(i)] {
			m[k] = v
		}
		return addr, m
	}
	t1 := time.Now()
	for i := range pc.daemons {
		addr, m := with(i, "daemon", map[string]string{"DQ_JOURNAL_DIR": scope.TempDir()})
		p := startProc(scope, e.hc, bin, "daemon", i, addr, m)
		e.daemons = append(e.daemons, p)
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		scope.Cleanup(tr.CloseIdleConnections)
		e.api = append(e.api, client.New("http://"+addr, client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 60 * time.Second})))
	}
	for i := range pc.events {
		addr, m := with(i, "event", map[string]string{
			"DQ_PROCESS_ID":    fmt.Sprintf("scale-event-%d", i),
			"DQ_DEFAULT_TOPIC": tasksTopic,
		})
		e.events = append(e.events, startProc(scope, e.hc, bin, "event", i, addr, m))
	}
	for i := range pc.workers {
		extra := map[string]string{
			"DQ_GROUP":       workerGroup,
			"DQ_TOPICS":      tasksTopic,
			"DQ_WEBHOOK_URL": e.hookURL,
		}
		if workConc > 0 {
			extra["DQ_WORK_CONCURRENCY"] = strconv.Itoa(workConc)
		}
		addr, m := with(i, "work", extra)
		e.workers = append(e.workers, startProc(scope, e.hc, bin, "work", i, addr, m))
	}
	// processes stop together (SIGTERM to all, then each waited for):
	// registered last, so it runs before each process's own stop
	scope.Cleanup(func() {
		for _, p := range e.all() {
			p.signal()
		}
	})
	e.waitLed(60 * time.Second)
	say("k=%d: infrastructure up in %v (cluster %v, etcd, kfake %d partitions), %d daemon(s), %d event, %d work process(es) healthy and every shard led %v later",
		k, infra.Round(10*time.Millisecond), e.cluster.Addrs, partitions, pc.daemons, pc.events, pc.workers, time.Since(t1).Round(10*time.Millisecond))
	return e
}

func (e *env) all() []*proc {
	var out []*proc
	out = append(out, e.workers...)
	out = append(out, e.events...)
	return append(out, e.daemons...)
}

// mapShards finds the master of every shard: CLUSTER KEYSLOT of the
// shard's hash tag {<ns>:<i>}, then the slot ranges the cluster was built
// with (checked against CLUSTER SLOTS).
func (e *env) mapShards() {
	ctx := e.scope.Context()
	ranges := e.ranges
	for i, rng := range ranges {
		if owner := e.cluster.SlotOwner(e.scope, rng[0]); owner != e.cluster.Addrs[i] {
			e.scope.Fatalf("slot %d is served by %s, want master %d %s", rng[0], owner, i, e.cluster.Addrs[i])
		}
	}
	e.shardsPerMaster = make([]int, e.k)
	nsSlot, err := e.nodes[0].ClusterKeySlot(ctx, "{"+namespace+"}").Result()
	if err != nil {
		e.scope.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	for i, rng := range ranges {
		if int(nsSlot) >= rng[0] && int(nsSlot) <= rng[1] {
			e.nsMaster = i
		}
	}
	for s := range e.shards {
		slot, err := e.nodes[0].ClusterKeySlot(ctx, "{"+namespace+":"+strconv.Itoa(s)+"}").Result()
		if err != nil {
			e.scope.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		for i, rng := range ranges {
			if int(slot) >= rng[0] && int(slot) <= rng[1] {
				e.shardsPerMaster[i]++
			}
		}
	}
}

// waitLed waits until the event processes together lead every shard
// (delayq_shards_led on their /metrics).
func (e *env) waitLed(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		sum, why := 0, ""
		for _, p := range e.events {
			v, err := p.metric(e.hc, "delayq_shards_led")
			if err != nil {
				why = err.Error()
			}
			sum += int(v)
		}
		if sum == e.shards {
			return
		}
		for _, p := range e.all() {
			if p.exited() {
				e.scope.Fatalf("%s exited\n--- output ---\n%s", p.name, p.out.String())
			}
		}
		if time.Now().After(deadline) {
			e.scope.Fatalf("k=%d: %d of %d shards led after %v (%s)", e.k, sum, e.shards, timeout, why)
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a bounded wait
	}
}

// checkAlive fails the run if a delayq process died.
func (e *env) checkAlive() {
	for _, p := range e.all() {
		if p.exited() {
			e.scope.Fatalf("%s exited during the run\n--- output ---\n%s", p.name, p.out.String())
		}
	}
}

// startConsumer reads every record of both task topics from the start
// (a plain franz-go consumer, no group; FetchMaxWait 10ms, franz-go's
// least) and hands each to e.consumer with the time PollFetches returned it.
func (e *env) startConsumer() {
	e.kafka.Consume(e.scope, func(r *kgo.Record, at time.Time) {
		id, _ := testenv.Header(r, record.HeaderID)
		due, _ := testenv.Header(r, record.HeaderDueAt)
		e.consumer.see(id, due, at)
	}, kgo.ConsumeTopics(tasksTopic, burstTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(10*time.Millisecond))
}

// startWebhook serves the work processes' webhook (DQ_WEBHOOK_URL): 200 at
// once, every call handed to e.hook with its receive time.
func (e *env) startWebhook() {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(testenv.FreePort(e.scope)))
	if err != nil {
		e.scope.Fatalf("webhook listener: %v", err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := time.Now()
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
			e.hook.see(r.Header.Get("Dq-Id"), r.Header.Get("Dq-Due-At"), now)
		}),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.scope.Logf("webhook server: %v", err)
		}
	}()
	e.scope.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	e.hookURL = "http://" + ln.Addr().String() + "/hook"
}

// redisCPU is each master's CPU time so far (INFO cpu).
func (e *env) redisCPU() []time.Duration {
	out := make([]time.Duration, len(e.nodes))
	for i, n := range e.nodes {
		out[i] = testenv.RedisCPU(e.scope, n)
	}
	return out
}

// redisStats is what one reading of every master's INFO gives the
// per-task figures: commandstats summed, and the reads and writes of
// client connections (stats' total_reads_processed and
// total_writes_processed: a read takes whatever a client sent, a call or
// a pipeline's calls together; a write sends answers back).
type redisStats struct {
	cmds          map[string]testenv.CommandStat
	reads, writes int64
}

// commandStats reads INFO commandstats and stats of every master, in one
// INFO call each.
func (e *env) commandStats() redisStats {
	out := redisStats{cmds: map[string]testenv.CommandStat{}}
	for _, n := range e.nodes {
		info, err := n.Info(e.scope.Context(), "commandstats", "stats").Result()
		if err != nil {
			e.scope.Fatalf("INFO commandstats stats: %v", err)
		}
		for name, c := range testenv.ParseCommandStats(info) {
			o := out.cmds[name]
			o.Calls += c.Calls
			o.Usec += c.Usec
			out.cmds[name] = o
		}
		for line := range strings.SplitSeq(info, "\r\n") {
			var sum *int64
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "total_reads_processed":
				sum = &out.reads
			case "total_writes_processed":
				sum = &out.writes
			default:
				continue
			}
			c, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				e.scope.Fatalf("INFO stats: %s: %v", line, err)
			}
			*sum += c
		}
	}
	return out
}

// keysPerMaster is DBSIZE of every master.
func (e *env) keysPerMaster() []int64 {
	out := make([]int64, len(e.nodes))
	for i, n := range e.nodes {
		out[i], _ = n.DBSize(e.scope.Context()).Result()
	}
	return out
}

// tap hands each observation to the watch currently set, if any.
type tap struct {
	cur   atomic.Pointer[watch]
	calls atomic.Int64
}

func (t *tap) see(id, dueMillis string, at time.Time) {
	t.calls.Add(1)
	if w := t.cur.Load(); w != nil {
		w.see(id, dueMillis, at)
	}
}

// watch collects the observations of one phase's tasks (ids with prefix)
// until want distinct ids were seen.
type watch struct {
	prefix string
	want   int

	mu          sync.Mutex
	seen        map[string]struct{}
	lags        []time.Duration // receive time - due time, first copy of each id
	first, last time.Time
	dups        int
	done        chan struct{}
}

func newWatch(prefix string, want int) *watch {
	return &watch{prefix: prefix, want: want, seen: make(map[string]struct{}, want), done: make(chan struct{})}
}

func (w *watch) see(id, dueMillis string, at time.Time) {
	if !strings.HasPrefix(id, w.prefix) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.seen[id]; ok {
		w.dups++
		return
	}
	w.seen[id] = struct{}{}
	if ms, err := strconv.ParseInt(dueMillis, 10, 64); err == nil {
		w.lags = append(w.lags, at.Sub(time.UnixMilli(ms)))
	}
	if w.first.IsZero() {
		w.first = at
	}
	w.last = at
	if len(w.seen) == w.want {
		close(w.done)
	}
}

// wait waits until every task was seen or timeout passed; it reports
// whether all were seen.
func (w *watch) wait(timeout time.Duration) bool {
	select {
	case <-w.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// snapshot returns the count seen, the first and last receive times, the
// lags and the duplicates.
func (w *watch) snapshot() (n int, first, last time.Time, lags []time.Duration, dups int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen), w.first, w.last, append([]time.Duration(nil), w.lags...), w.dups
}

// cpuSnap is the CPU time each kind of process has used so far, at one
// instant.
type cpuSnap struct {
	at                       time.Time
	masters                  []time.Duration // INFO cpu of every master
	daemons, events, workers time.Duration   // /proc/<pid>/stat, summed
	broker                   time.Duration   // the kfake child's /proc/<pid>/stat
	bench                    time.Duration   // this process: etcd, the webhook sink, the consumer, the clients
}

func (e *env) cpuSnap() cpuSnap {
	s := cpuSnap{at: time.Now(), masters: e.redisCPU(), bench: selfCPU(), broker: e.broker.cpu()}
	sum := func(ps []*proc) time.Duration {
		var d time.Duration
		for _, p := range ps {
			d += procCPU(p.cmd.Process.Pid)
		}
		return d
	}
	s.daemons, s.events, s.workers = sum(e.daemons), sum(e.events), sum(e.workers)
	return s
}

// workEach is each work process' CPU used so far and the tasks it has
// handled (delayq_work_handled_total on its /metrics, every outcome), at
// one instant: processes of one run given different settings (-env
// work1:NAME=VALUE) compared under the same load, on the same machine at
// the same time.
type workEach struct {
	cpu     []time.Duration
	handled []float64
}

func (e *env) workEach() workEach {
	var w workEach
	for _, p := range e.workers {
		n, err := p.metric(e.hc, "delayq_work_handled_total")
		if errors.Is(err, errNotExported) {
			n = 0 // nothing handled yet
		} else if err != nil {
			n = -1 // unknown: not printed
		}
		w.cpu, w.handled = append(w.cpu, procCPU(p.cmd.Process.Pid)), append(w.handled, n)
	}
	return w
}

// Cores is how many cores each kind of process kept busy during a window
// (CPU time used / wall time): where a rate stops growing, it tells which
// part ran out of CPU, or that none did.
type Cores struct {
	Method        string  `json:"method"`
	Seconds       float64 `json:"window_s"`
	Redis         float64 `json:"redis_all_masters"`
	BusiestMaster float64 `json:"redis_busiest_master"`
	Daemons       float64 `json:"daemons"`
	Events        float64 `json:"events"`
	Workers       float64 `json:"workers"`
	Broker        float64 `json:"broker"`
	Bench         float64 `json:"bench_process"`
	Total         float64 `json:"total"`
}

// coresBusy is the cores each kind kept busy between a and b.
func coresBusy(a, b cpuSnap) Cores {
	w := b.at.Sub(a.at).Seconds()
	c := Cores{Method: "CPU time used between two instants / the wall time between them: INFO cpu of every master, /proc/<pid>/stat of every delayq process and of the kfake broker (a child process), getrusage of the bench process (etcd, the webhook sink, the Kafka consumer, the scheduling clients)", Seconds: w}
	if w <= 0 {
		return c
	}
	for i := range a.masters {
		m := (b.masters[i] - a.masters[i]).Seconds() / w
		c.Redis += m
		c.BusiestMaster = max(c.BusiestMaster, m)
	}
	c.Daemons = (b.daemons - a.daemons).Seconds() / w
	c.Events = (b.events - a.events).Seconds() / w
	c.Workers = (b.workers - a.workers).Seconds() / w
	c.Broker = (b.broker - a.broker).Seconds() / w
	c.Bench = (b.bench - a.bench).Seconds() / w
	c.Total = c.Redis + c.Daemons + c.Events + c.Workers + c.Broker + c.Bench
	return c
}

func (c Cores) String() string {
	return fmt.Sprintf("redis %.2f (busiest master %.2f), daemons %.2f, events %.2f, workers %.2f, broker %.2f, bench process %.2f; total %.2f",
		c.Redis, c.BusiestMaster, c.Daemons, c.Events, c.Workers, c.Broker, c.Bench, c.Total)
}

// PerTask is the CPU each kind of process used per task over a phase,
// from before its tasks were scheduled until the last was seen (µs):
// Pipeline is delayq's own sum (daemons, events, work processes and
// redis-server); the broker and the bench process (the webhook sink, the
// consumer, the scheduling clients, etcd) are apart.
type PerTask struct {
	Method   string  `json:"method"`
	Daemons  float64 `json:"daemons_us"`
	Events   float64 `json:"events_us"`
	Workers  float64 `json:"workers_us"`
	Redis    float64 `json:"redis_us"`
	Pipeline float64 `json:"pipeline_us"`
	Broker   float64 `json:"broker_us"`
	Bench    float64 `json:"bench_process_us"`
}

// perTask divides the CPU each kind used between a and z by n tasks.
func perTask(a, z cpuSnap, n int) PerTask {
	p := PerTask{Method: "CPU time used from before the phase's tasks were scheduled until the last was seen (and the finishes settled), per task: /proc/<pid>/stat of every delayq process and of the kfake broker, INFO cpu of every master, getrusage of the bench process; idle work in the window (pollers, elections) included"}
	if n <= 0 {
		return p
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(n) }
	for i := range a.masters {
		p.Redis += us(z.masters[i] - a.masters[i])
	}
	p.Daemons, p.Events, p.Workers = us(z.daemons-a.daemons), us(z.events-a.events), us(z.workers-a.workers)
	p.Pipeline = p.Daemons + p.Events + p.Workers + p.Redis
	p.Broker, p.Bench = us(z.broker-a.broker), us(z.bench-a.bench)
	return p
}

func (p PerTask) String() string {
	return fmt.Sprintf("daemons %.1f + events %.1f + work %.1f + redis %.1f = pipeline %.1f µs; broker %.1f, bench process (webhook sink, consumer, clients, etcd) %.1f",
		p.Daemons, p.Events, p.Workers, p.Redis, p.Pipeline, p.Broker, p.Bench)
}
