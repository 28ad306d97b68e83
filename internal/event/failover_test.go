package event

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

// child is an event binary running as a child process.
type child struct {
	id   string
	addr string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string
	done chan struct{}
}

func (w *world) startChild(id string, ttl time.Duration) *child {
	t := w.t
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cmd := exec.Command(eventBin)
	cmd.Env = append(os.Environ(),
		"DQ_NAMESPACE="+w.ns,
		"DQ_SHARDS="+strconv.Itoa(w.shards),
		"DQ_REDIS_ADDRS="+w.redis.Addr,
		"DQ_ETCD_ENDPOINTS="+w.etcd.Endpoints[0],
		"DQ_KAFKA_BROKERS="+w.kafka.Brokers[0],
		"DQ_HTTP_ADDR="+addr,
		"DQ_PROCESS_ID="+id,
		"DQ_SESSION_TTL="+ttl.String(),
		"DQ_LOG_FORMAT=text",
		"DQ_LOG_LEVEL=info",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{id: id, addr: addr, cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.mu.Lock()
			c.out = append(c.out, sc.Text())
			if len(c.out) > 400 {
				c.out = c.out[len(c.out)-400:]
			}
			c.mu.Unlock()
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
		if t.Failed() {
			c.mu.Lock()
			t.Logf("--- %s output tail ---\n%s", id, joinLines(c.out[max(0, len(c.out)-60):]))
			c.mu.Unlock()
		}
	})
	if !poll(15*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("%s not ready", id)
	}
	return c
}

func joinLines(ls []string) string {
	s := ""
	for _, l := range ls {
		s += l + "\n"
	}
	return s
}

// leadingChildren adapts children for waitBalanced (their shards from
// /metrics).
type leadingChild struct {
	t *testing.T
	c *child
}

func (l leadingChild) Leading() []int {
	n := int(metric(l.t, l.c.addr, "delayq_shards_led"))
	return make([]int, n)
}

// TestFailoverKillTheBusiestProcess runs two event binaries, SIGKILLs the
// one leading the most shards while tasks fire, and checks that nothing is
// lost and that firing of its shards resumes within the session TTL + 1s.
func TestFailoverKillTheBusiestProcess(t *testing.T) {
	const (
		n   = 12000
		ttl = 3 * time.Second
	)
	w := newWorld(t, 16)
	recs := w.collect(task.DefaultTopic)
	p1 := w.startChild("fo-1", ttl)
	p2 := w.startChild("fo-2", ttl)
	got := w.waitBalanced(15*time.Second, leadingChild{t, p1}, leadingChild{t, p2})
	say(t, "before the kill: %v", got)

	start := time.Now().Add(1500 * time.Millisecond)
	tasks := w.scheduleSpread("failover", n, start, 8*time.Second)

	// Kill the busiest one ~2.5s into the firing.
	testenv.WaitFor(t, 20*time.Second, "firing under way", func() bool { return recs.Distinct() >= n/4 })
	leaders := w.leaders()
	counts := countsOf(leaders)
	victim, survivor := p1, p2
	if counts[p2.id] > counts[p1.id] {
		victim, survivor = p2, p1
	}
	var victimShards []int
	for s, id := range leaders {
		if id == victim.id {
			victimShards = append(victimShards, s)
		}
	}
	slices.Sort(victimShards)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	<-victim.done
	say(t, "SIGKILLed %s (led shards %v) at %s; %d of %d tasks fired so far",
		victim.id, victimShards, killedAt.Format("15:04:05.000"), recs.Distinct(), n)

	waitAll(t, recs, tasks, 40*time.Second)
	snap := recs.ByID()
	r := check(tasks, snap)
	r.fail(t)

	// Resumption per victim shard: the first record fired after the kill.
	resume := map[int]time.Duration{}
	for _, rs := range snap {
		for _, rec := range rs {
			s := redisstore.ShardOf(hdr(rec, record.HeaderID), w.shards)
			fired := time.UnixMilli(hdrInt(rec, record.HeaderFiredAt))
			if !slices.Contains(victimShards, s) || !fired.After(killedAt) {
				continue
			}
			if d, ok := resume[s]; !ok || fired.Sub(killedAt) < d {
				resume[s] = fired.Sub(killedAt)
			}
		}
	}
	var worst time.Duration
	for _, s := range victimShards {
		d, ok := resume[s]
		if !ok {
			t.Errorf("shard %d never fired again after the kill", s)
			continue
		}
		worst = max(worst, d)
	}
	p50, p99, mx := quantiles(r.lags)
	say(t, "failover: %d tasks, %d records, %d duplicates (re-fired claims of the killed process), lost 0", r.tasks, r.records, r.dups)
	say(t, "failover: firing of the killed process' %d shards resumed after at most %v (TTL %v); per shard %v", len(victimShards), worst, ttl, fmtResume(resume))
	say(t, "failover: lag over the whole run p50=%v p99=%v max=%v", p50, p99, mx)
	if worst > ttl+time.Second {
		t.Errorf("firing resumed after %v, want within TTL + 1s = %v", worst, ttl+time.Second)
	}
	say(t, "survivor %s leads %v shards", survivor.id, metric(t, survivor.addr, "delayq_shards_led"))
	if lr := metric(t, survivor.addr, "delayq_lease_reclaims_total"); lr == 0 && r.dups > 0 {
		t.Log("duplicates without a counted reclaim")
	}
}

func fmtResume(m map[int]time.Duration) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := ""
	for _, k := range keys {
		s += fmt.Sprintf("%d:%v ", k, m[k].Round(time.Millisecond))
	}
	return s
}
