package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/internal/testenv"
)

// localBinaries are the daemon, event and work binaries built from this
// tree once per test binary run.
var localBinaries struct {
	once sync.Once
	dir  string
	path map[Role]string
	err  map[Role]error
}

// buildLocal builds cmd/daemon, cmd/event and cmd/work into a temporary
// directory (removed by TestMain) and returns the binaries and, per role,
// why it could not be built.
func buildLocal() (map[Role]string, map[Role]error) {
	b := &localBinaries
	b.once.Do(func() {
		b.path, b.err = map[Role]string{}, map[Role]error{}
		fail := func(err error) {
			for _, r := range Roles {
				b.err[r] = err
			}
		}
		dir, err := os.MkdirTemp("", "dq-integration-bin-")
		if err != nil {
			fail(err)
			return
		}
		b.dir = dir
		root, err := moduleRoot()
		if err != nil {
			fail(err)
			return
		}
		build := func(roles ...Role) error {
			// Built like the images, so that deploy/build-images.sh
			// reuses the compiled packages.
			pkgs := make([]string, len(roles))
			for i, r := range roles {
				pkgs[i] = "./cmd/" + string(r)
			}
			return testenv.GoBuild(context.Background(), root, dir, "", pkgs...)
		}
		start := time.Now()
		if err := build(Roles...); err != nil {
			// Find out which binary does not build; the others still run.
			for _, r := range Roles {
				b.err[r] = build(r)
			}
		}
		for _, r := range Roles {
			if b.err[r] == nil {
				b.path[r] = filepath.Join(dir, string(r))
			}
		}
		fmt.Fprintf(os.Stderr, "integration: built the binaries in %.1fs\n", time.Since(start).Seconds())
	})
	return b.path, b.err
}

// moduleRoot is the directory holding go.mod (tests run in integration/).
func moduleRoot() (string, error) {
	dir, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("module root not found at %s: %w", dir, err)
	}
	return dir, nil
}

// localProvisioner runs the binaries as child processes next to
// testenv's redis-server, embedded etcd and kfake; secure: all of them in
// their secured modes (secure_test.go).
type localProvisioner struct{ secure bool }

func (p localProvisioner) Name() string {
	if p.secure {
		return "local-secure"
	}
	return "local"
}

func (p localProvisioner) Start(t *testing.T, spec Spec) Cluster {
	t.Helper()
	bins, errs := buildLocal()
	for _, r := range Roles {
		if spec.count(r) > 0 && errs[r] != nil {
			t.Fatalf("local tier: build %s: %v", r, errs[r])
		}
	}
	c := &localCluster{
		ns:     uniqueName("it"),
		inst:   map[Role][]*localInstance{},
		hc:     &http.Client{Timeout: 2 * time.Second, Transport: trusting()},
		scheme: "http",
	}
	var infra map[string]string
	hook := httptest.NewUnstartedServer(spec.Webhook)
	if p.secure {
		infra = c.startSecure(t, hook)
		c.scheme = "https"
	} else {
		var redisEnv map[string]string
		switch {
		case spec.RedisMasters > 0 && spec.RedisSentinel:
			t.Fatal("local tier: Spec.RedisMasters and RedisSentinel exclude each other")
		case spec.RedisMasters > 0:
			c.cluster = testenv.StartRedisClusterReplicas(t, spec.RedisMasters, testenv.RedisOptions{AOF: true, AppendFsync: "everysec"})
			redisEnv = map[string]string{"DQ_REDIS_ADDRS": strings.Join(c.cluster.Addrs, ",")}
		case spec.RedisSentinel:
			c.sentinel = testenv.StartSentinel(t, 2, testenv.RedisOptions{AOF: true, AppendFsync: "everysec"})
			redisEnv = map[string]string{
				"DQ_REDIS_SENTINEL_ADDRS":  strings.Join(c.sentinel.SentinelAddrs, ","),
				"DQ_REDIS_SENTINEL_MASTER": c.sentinel.MasterName,
			}
		default:
			c.redis = testenv.StartRedis(t, testenv.RedisOptions{AOF: true})
			redisEnv = map[string]string{"DQ_REDIS_ADDRS": c.redis.Addr}
		}
		c.etcd = testenv.StartEtcd(t)
		c.kafka = testenv.StartKafka(t, "dq.tasks", "dq.dead", "dq.outcomes")
		hook.Start()
		infra = merge(redisEnv, map[string]string{
			"DQ_ETCD_ENDPOINTS": strings.Join(c.etcd.Endpoints, ","),
			"DQ_KAFKA_BROKERS":  strings.Join(c.kafka.Brokers, ","),
		})
	}
	t.Cleanup(hook.Close)
	env := merge(baseEnv(c.ns), infra, spec.Env)
	c.shards, _ = strconv.Atoi(env["DQ_SHARDS"])
	t.Cleanup(func() {
		// Stop every child even when the test failed half-way, and show
		// their logs when it failed.
		for _, r := range Roles {
			for _, in := range c.inst[r] {
				in.kill()
				if t.Failed() {
					t.Logf("--- %s %d (%s) output tail ---\n%s", r, in.i, in.addr, in.out.Tail(6000))
				}
			}
		}
	})
	for _, r := range Roles {
		for i := range spec.count(r) {
			in := &localInstance{role: r, i: i, path: bins[r], out: new(tailBuffer)}
			in.addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
			ienv := merge(env, map[string]string{"DQ_HTTP_ADDR": in.addr})
			if r == Work {
				ienv["DQ_WEBHOOK_URL"] = workerHook(hook.URL, i)
			}
			if r == Daemon {
				ienv["DQ_JOURNAL_DIR"] = t.TempDir()
			}
			for k, v := range ienv {
				in.env = append(in.env, k+"="+v)
			}
			sort.Strings(in.env)
			c.inst[r] = append(c.inst[r], in)
		}
	}
	// Start order as in production: daemon, then event and work; each
	// role's instances concurrently. Deferred work processes wait for the
	// test's Start.
	for _, r := range Roles {
		if r == Work && spec.DeferWorkers {
			continue
		}
		var wg sync.WaitGroup
		errs := make([]error, len(c.inst[r]))
		for i, in := range c.inst[r] {
			wg.Go(func() { errs[i] = c.startInstance(in) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

type localCluster struct {
	ns     string
	scheme string // of the binaries' HTTP ports: https in the secured tier
	shards int
	redis  *testenv.Redis
	// cluster replaces redis with Spec.RedisMasters, sentinel with
	// Spec.RedisSentinel
	cluster  *testenv.RedisCluster
	sentinel *testenv.SentinelSet
	etcd     *testenv.Etcd
	kafka    *testenv.Kafka
	inst     map[Role][]*localInstance
	hc       *http.Client
}

// localInstance is one child process; it keeps its port and directories
// across restarts.
type localInstance struct {
	role Role
	i    int
	path string
	env  []string
	orig []string // env before the first restartWith
	addr string
	out  *tailBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (c *localCluster) get(t *testing.T, r Role, i int) *localInstance {
	t.Helper()
	if i < 0 || i >= len(c.inst[r]) {
		t.Fatalf("no %s %d (have %d)", r, i, len(c.inst[r]))
	}
	return c.inst[r][i]
}

// startInstance starts the process and waits until /healthz answers.
func (c *localCluster) startInstance(in *localInstance) error {
	in.mu.Lock()
	if in.cmd != nil && !in.exited() {
		in.mu.Unlock()
		return fmt.Errorf("%s %d already runs", in.role, in.i)
	}
	cmd := exec.Command(in.path)
	cmd.Env = in.env
	fmt.Fprintf(in.out, "=== start %s %d at %s\n", in.role, in.i, time.Now().Format(time.RFC3339Nano))
	cmd.Stdout, cmd.Stderr = in.out, in.out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		in.mu.Unlock()
		return fmt.Errorf("start %s %d: %w", in.role, in.i, err)
	}
	done := make(chan struct{})
	in.cmd, in.done = cmd, done
	go func() { _ = cmd.Wait(); close(done) }()
	in.mu.Unlock()

	deadline := time.Now().Add(30 * time.Second)
	why := ""
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("%s %d exited during start (%v)\n--- output ---\n%s", in.role, in.i, cmd.ProcessState, in.out.Tail(6000))
		default:
		}
		var ok bool
		if ok, why = probe(c.hc, c.scheme+"://"+in.addr+"/healthz"); ok {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a bounded readiness loop
	}
	in.kill()
	return fmt.Errorf("%s %d not healthy within 30s (%s)\n--- output ---\n%s", in.role, in.i, why, in.out.Tail(6000))
}

func (in *localInstance) exited() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

func (in *localInstance) kill() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil || in.exited() {
		return
	}
	_ = in.cmd.Process.Signal(syscall.SIGKILL)
	<-in.done
}

// Environ is the environment instance i of role r runs with now, as the
// kernel holds it (/proc/PID/environ): what an exec of its own gave it.
func (c *localCluster) Environ(t *testing.T, r Role, i int) []string {
	t.Helper()
	in := c.get(t, r, i)
	in.mu.Lock()
	pid := in.cmd.Process.Pid
	in.mu.Unlock()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("%s %d: %v", r, i, err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func (c *localCluster) DaemonURL(i int) string { return c.scheme + "://" + c.inst[Daemon][i].addr }

func (c *localCluster) AdminURL(r Role, i int) string { return c.scheme + "://" + c.inst[r][i].addr }

func (c *localCluster) Brokers() []string { return c.kafka.Brokers }

func (c *localCluster) KafkaOpts() []kgo.Opt { return c.kafka.Opts() }

func (c *localCluster) Namespace() string { return c.ns }

func (c *localCluster) Shards() int { return c.shards }

func (c *localCluster) Kill(t *testing.T, r Role, i int) {
	t.Helper()
	in := c.get(t, r, i)
	in.kill()
	fmt.Fprintf(in.out, "=== killed at %s\n", time.Now().Format(time.RFC3339Nano))
}

func (c *localCluster) Stop(t *testing.T, r Role, i int) {
	t.Helper()
	in := c.get(t, r, i)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil || in.exited() {
		return
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(20 * time.Second):
		_ = in.cmd.Process.Signal(syscall.SIGKILL)
		<-in.done
		t.Fatalf("%s %d did not exit within 20s of SIGTERM\n%s", r, i, in.out.Tail(6000))
	}
	if code := in.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s %d exited with %d after SIGTERM\n%s", r, i, code, in.out.Tail(6000))
	}
}

func (c *localCluster) Start(t *testing.T, r Role, i int) {
	t.Helper()
	if err := c.startInstance(c.get(t, r, i)); err != nil {
		t.Fatal(err)
	}
}

// RedisCluster is the Redis Cluster of Spec.RedisMasters (nil without).
func (c *localCluster) RedisCluster() *testenv.RedisCluster { return c.cluster }

// RedisSentinel is the Sentinel deployment of Spec.RedisSentinel (nil
// without).
func (c *localCluster) RedisSentinel() *testenv.SentinelSet { return c.sentinel }

func (c *localCluster) StopRedis(t *testing.T)  { t.Helper(); c.redis.Stop(t) }
func (c *localCluster) StartRedis(t *testing.T) { t.Helper(); c.redis.Restart(t) }

func (c *localCluster) Disconnect(t *testing.T, r Role, i int) {
	t.Helper()
	t.Fatalf("local tier: cannot cut %s %d off the network (processes share the loopback interface); partition scenarios run in the container tier", r, i)
}

func (c *localCluster) Reconnect(t *testing.T, r Role, i int) { c.Disconnect(t, r, i) }

func (c *localCluster) Logs(r Role, i int) string { return c.inst[r][i].out.Tail(6000) }
