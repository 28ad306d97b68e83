package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/election"
	"github.com/delayq/delayq/internal/testenv"
)

// clusterConfig says what one run starts.
type clusterConfig struct {
	Daemons, Events, Works int
	EtcdMembers            int
	Shards                 int
	SessionTTL             time.Duration
	Bins                   map[role]string
	EventEnv               map[string]string // added to every event process (DQ_PLANT, ...)
	Seed                   uint64
	Redis                  redisMode // default redisSingle
	ReplicaAcks            int       // DQ_REDIS_REPLICA_ACKS in cluster mode
}

// cluster is one run's delayq: redis-server with AOF (or, in cluster
// mode, a Redis Cluster with replicas), an embedded etcd cluster, kfake,
// the webhook sink and the supervised binaries, each reaching every etcd
// member, and the single redis-server, through proxies of its own.
type cluster struct {
	t      *testing.T
	cfg    clusterConfig
	ns     string
	redis  *testenv.Redis // single mode
	ha     *haRedis       // cluster mode
	etcd   *testenv.EtcdCluster
	kafka  *testenv.Kafka
	etcdc  *clientv3.Client
	kf     *kafkaFaults
	sink   *sink
	procs  []*proc
	byRole map[role][]*proc
	links  map[*proc]*links
}

// links are one process' proxies.
type links struct {
	redis *testenv.Proxy   // nil in cluster mode
	etcd  []*testenv.Proxy // one per member
}

func (l *links) all() []*testenv.Proxy {
	if l.redis == nil {
		return slices.Clone(l.etcd)
	}
	return append([]*testenv.Proxy{l.redis}, l.etcd...)
}

func startCluster(t *testing.T, cfg clusterConfig) *cluster {
	t.Helper()
	if cfg.Shards == 0 {
		cfg.Shards = 8
	}
	if cfg.Redis == "" {
		cfg.Redis = redisSingle
	}
	c := &cluster{
		t: t, cfg: cfg, ns: fmt.Sprintf("chaos%d", cfg.Seed%1_000_000),
		etcd:   testenv.StartEtcdCluster(t, cfg.EtcdMembers),
		sink:   newSink(),
		byRole: map[role][]*proc{},
		links:  map[*proc]*links{},
	}
	c.kafka, c.kf = startFaultyKafka(t, testenv.KafkaOptions{Topics: []string{tasksTopic, deadTopic, "dq.outcomes"}})
	if cfg.Redis == redisClusterMode {
		c.ha = startHARedis(t)
	} else {
		c.redis = testenv.StartRedis(t, testenv.RedisOptions{AOF: true})
	}
	c.etcdc = c.etcd.Client(t)
	c.limitTopicMessageBytes(t, tasksTopic, tasksTopicMaxMsg)
	hook := httptest.NewServer(c.sink)
	t.Cleanup(hook.Close)

	common := map[string]string{
		"DQ_NAMESPACE":        c.ns,
		"DQ_SHARDS":           strconv.Itoa(cfg.Shards),
		"DQ_LOG_FORMAT":       "text",
		"DQ_LOG_LEVEL":        "info",
		"DQ_SHUTDOWN_TIMEOUT": "3s",
	}
	// DQ_CHAOS_LOG_LEVEL (e.g. debug) sets every process' log level, for
	// following one task through the logs kept by DQ_CHAOS_LOG_DIR.
	if lv := os.Getenv("DQ_CHAOS_LOG_LEVEL"); lv != "" {
		common["DQ_LOG_LEVEL"] = lv
	}
	if c.ha != nil {
		common["DQ_REDIS_ADDRS"] = strings.Join(c.ha.rc.Addrs, ",")
		common["DQ_REDIS_REPLICA_ACKS"] = strconv.Itoa(cfg.ReplicaAcks)
	}
	perRole := map[role]map[string]string{
		daemonRole: {"DQ_REDIS_TIMEOUT": "1s"},
		eventRole: {
			"DQ_KAFKA_BROKERS":       strings.Join(c.kafka.Brokers, ","),
			"DQ_SESSION_TTL":         cfg.SessionTTL.String(),
			"DQ_LEASE":               "8s",
			"DQ_KAFKA_WRITE_TIMEOUT": "4s",
			"DQ_DEFAULT_TOPIC":       tasksTopic,
			"DQ_DEAD_TOPIC":          deadTopic,
			"DQ_FIRE_POISON_GRACE":   poisonGrace.String(),
		},
		workRole: {
			"DQ_KAFKA_BROKERS":         strings.Join(c.kafka.Brokers, ","),
			"DQ_GROUP":                 c.ns + "-work",
			"DQ_TOPICS":                tasksTopic,
			"DQ_DEAD_TOPIC":            deadTopic,
			"DQ_WEBHOOK_URL":           hook.URL + "/hook",
			"DQ_KAFKA_SESSION_TIMEOUT": "6s", // kfake's minimum
			"DQ_KAFKA_HEARTBEAT":       "500ms",
			"DQ_CLAIM_MARGIN":          "1s",
			"DQ_DEFAULT_TIMEOUT":       "2s",
			"DQ_BACKOFF_MIN":           "200ms",
			"DQ_BACKOFF_MAX":           "2s",
		},
	}
	for k, v := range cfg.EventEnv {
		perRole[eventRole][k] = v
	}
	t.Cleanup(c.teardown)
	// DQ_CHAOS_LOG_DIR keeps every process' whole output, one file per
	// process under a directory per test.
	logDir := ""
	if d := os.Getenv("DQ_CHAOS_LOG_DIR"); d != "" {
		logDir = filepath.Join(d, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatalf("chaos: DQ_CHAOS_LOG_DIR: %v", err)
		}
		t.Logf("chaos: process output kept in %s", logDir)
	}
	counts := []struct {
		r role
		n int
	}{{daemonRole, cfg.Daemons}, {eventRole, cfg.Events}, {workRole, cfg.Works}}
	for _, rc := range counts {
		for i := range rc.n {
			name := fmt.Sprintf("%s-%d", rc.r, i)
			l := &links{}
			if c.redis != nil {
				var err error
				if l.redis, err = testenv.StartProxy("127.0.0.1:0", c.redis.Addr); err != nil {
					t.Fatalf("chaos: proxy: %v", err)
				}
			}
			var etcdAddrs []string
			for _, m := range c.etcd.Members {
				px, err := testenv.StartProxy("127.0.0.1:0", m.Endpoints[0])
				if err != nil {
					t.Fatalf("chaos: proxy: %v", err)
				}
				l.etcd = append(l.etcd, px)
				etcdAddrs = append(etcdAddrs, px.Addr())
			}
			env := map[string]string{}
			for k, v := range common {
				env[k] = v
			}
			for k, v := range perRole[rc.r] {
				env[k] = v
			}
			addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
			env["DQ_HTTP_ADDR"] = addr
			if l.redis != nil {
				env["DQ_REDIS_ADDRS"] = l.redis.Addr()
			}
			env["DQ_ETCD_ENDPOINTS"] = strings.Join(etcdAddrs, ",")
			if rc.r == daemonRole {
				env["DQ_JOURNAL_DIR"] = t.TempDir()
			}
			p := newProc(name, rc.r, cfg.Bins[rc.r], addr, env, cfg.Seed*1000+uint64(len(c.procs))*100)
			if logDir != "" {
				if err := p.out.keepIn(filepath.Join(logDir, name+".log")); err != nil {
					t.Fatalf("chaos: %v", err)
				}
			}
			c.procs = append(c.procs, p)
			c.byRole[rc.r] = append(c.byRole[rc.r], p)
			c.links[p] = l
		}
	}
	for _, p := range c.procs {
		go p.supervise()
	}
	c.waitHealthy(60 * time.Second)
	return c
}

// teardown stops everything the run started, each step under a time
// limit (a step that hangs fails the test with a goroutine dump instead of
// hanging the package): the supervised processes, the proxies, then etcd
// and redis-server (testenv's own cleanups then find them stopped).
func (c *cluster) teardown() {
	t := c.t
	setDoing(t, "teardown: stopping the processes")
	var mu sync.Mutex
	var errs []string
	var wg sync.WaitGroup
	for _, p := range c.procs {
		wg.Go(func() {
			if err := p.shutdown(); err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			}
		})
	}
	wg.Wait() // each shutdown is bounded
	setDoing(t, "teardown: closing the proxies")
	for _, l := range c.links {
		for _, px := range l.all() {
			if err := px.CloseWithin(closeLimit); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		t.Errorf("chaos: teardown: %s (every goroutine's stack: %s)", strings.Join(errs, "; "), dumpGoroutines(t, "teardown stuck"))
	}
	for _, p := range c.procs {
		p.out.close()
	}
	setDoing(t, "teardown: stopping etcd")
	if err := runStep(t, "teardown: stop the etcd members", etcdStopLimit, func(tb testing.TB) {
		for _, m := range c.etcd.Members {
			m.Stop(tb)
		}
	}); err != nil {
		t.Errorf("chaos: %v", err)
	}
	setDoing(t, "teardown: stopping redis-server")
	if err := runStep(t, "teardown: kill redis-server", redisStepLimit, func(tb testing.TB) {
		if c.ha != nil {
			c.ha.killAll(tb)
		} else {
			c.redis.Kill(tb)
		}
	}); err != nil {
		t.Errorf("chaos: %v", err)
	}
	if t.Failed() {
		for _, p := range c.procs {
			t.Logf("--- %s output tail ---\n%s", p.name, p.out.Tail(12000))
		}
	}
	setDoing(t, "teardown: testenv cleanups (kfake, temporary directories)")
}

// daemonURLs are the daemons' API base URLs.
func (c *cluster) daemonURLs() []string {
	var out []string
	for _, p := range c.byRole[daemonRole] {
		out = append(out, "http://"+p.addr)
	}
	return out
}

// waitHealthy waits until every process answers /healthz (and every event
// process /readyz: it holds an etcd session).
func (c *cluster) waitHealthy(timeout time.Duration) {
	c.t.Helper()
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for _, p := range c.procs {
		path := "/healthz"
		if p.role == eventRole {
			path = "/readyz"
		}
		for {
			resp, err := hc.Get("http://" + p.addr + path)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("chaos: %s not healthy within %v (%v)\n%s", p.name, timeout, err, p.out.Tail(4000))
			}
			time.Sleep(50 * time.Millisecond) // readiness poll of a bounded loop
		}
	}
	hc.CloseIdleConnections()
}

// leaders returns, per shard, the process id leading it in etcd (the
// candidate key with the lowest create revision) and each key's lease.
func (c *cluster) leaders(ctx context.Context) (map[int]string, map[string]clientv3.LeaseID, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := c.etcdc.Get(ctx, election.ShardsPrefix(c.ns), clientv3.WithPrefix())
	if err != nil {
		return nil, nil, err
	}
	best := map[int]int64{}
	out := map[int]string{}
	leases := map[string]clientv3.LeaseID{}
	for _, kv := range resp.Kvs {
		shard, ok := election.ParseElectionKey(c.ns, string(kv.Key))
		if !ok {
			continue
		}
		if r, seen := best[shard]; !seen || kv.CreateRevision < r {
			best[shard] = kv.CreateRevision
			out[shard] = string(kv.Value)
			leases[string(kv.Value)] = clientv3.LeaseID(kv.Lease)
		}
	}
	return out, leases, nil
}

// topLeader is the event process leading the most shards among those ok
// accepts, with the lease of its leadership.
func (c *cluster) topLeader(ok func(*proc) bool) (*proc, clientv3.LeaseID, int) {
	byShard, leases, err := c.leaders(c.t.Context())
	if err != nil {
		return nil, 0, 0
	}
	count := map[string]int{}
	for _, id := range byShard {
		count[id]++
	}
	var top *proc
	var lease clientv3.LeaseID
	n := 0
	for id, k := range count {
		for _, p := range c.byRole[eventRole] {
			if p.name == procName(id) && ok(p) && p.running() && k > n {
				top, lease, n = p, leases[id], k
			}
		}
	}
	return top, lease, n
}

// kafkaFaults injects broker faults into kfake: errors on produce
// requests, and delayed produce and fetch requests (kafkaslow_test.go).
// Every process shares the one broker, so these faults hit all of them at
// once.
type kafkaFaults struct {
	c *kfake.Cluster

	mu          sync.Mutex
	slow        time.Duration // delay of produce and fetch requests
	dropProduce bool          // after the delay, drop produce requests unanswered (connection closed)
	errs        *kfake.FaultHandle
}

// startFaultyKafka starts the broker o says (its Listen is kf's) with
// kf's faults installed: held produce and fetch requests in its
// connections (kafkaslow_test.go), dropped produces in a control function.
func startFaultyKafka(t testing.TB, o testenv.KafkaOptions) (*testenv.Kafka, *kafkaFaults) {
	kf := &kafkaFaults{}
	o.Listen = func(network, address string) (net.Listener, error) {
		l, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		return &slowListener{Listener: l, delay: kf.delay}, nil
	}
	k := testenv.StartKafkaWith(t, o)
	kf.c = k.Cluster
	// a produce is dropped, once it was held, while the fault says so:
	// kfake never applies it (the connection is closed)
	k.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kf.mu.Lock()
		drop := kf.dropProduce
		kf.mu.Unlock()
		if drop {
			k.Cluster.KeepControl()
			return nil, errors.New("chaos: produce request dropped"), true
		}
		return nil, nil, false
	})
	return k, kf
}

// delay is how long the broker's connections hold a request with this API
// key now: produce and fetch while the broker is slow.
func (kf *kafkaFaults) delay(key int16) time.Duration {
	if key != int16(kmsg.Produce) && key != int16(kmsg.Fetch) {
		return 0
	}
	kf.mu.Lock()
	defer kf.mu.Unlock()
	return kf.slow
}

func (kf *kafkaFaults) setSlow(d time.Duration, drop bool) {
	kf.mu.Lock()
	defer kf.mu.Unlock()
	kf.slow, kf.dropProduce = d, drop
}

// produceErrors answers every produce request with err until healed.
func (kf *kafkaFaults) produceErrors(err *kerr.Error) {
	kf.mu.Lock()
	defer kf.mu.Unlock()
	if kf.errs == nil {
		kf.errs = kf.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: err, Count: -1})
	}
}

func (kf *kafkaFaults) healErrors() {
	kf.mu.Lock()
	defer kf.mu.Unlock()
	if kf.errs != nil {
		kf.errs.Remove()
		kf.errs = nil
	}
}
