package integration

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Role names one of delayq's binaries.
type Role string

// The binaries.
const (
	Daemon Role = "daemon"
	Event  Role = "event"
	Work   Role = "work"
)

// Roles in start order.
var Roles = []Role{Daemon, Event, Work}

// Spec says what a scenario needs.
type Spec struct {
	Daemons, Events, Workers int
	// Env is added to every binary's environment (after the provisioner's
	// own settings, so it wins).
	Env map[string]string
	// Webhook receives the work binary's deliveries (DQ_WEBHOOK_URL).
	Webhook http.Handler
	// RedisMasters > 0 (local tier only): Redis is a Redis Cluster of that
	// many masters, each with one replica (AOF everysec, node timeout 2s),
	// instead of one redis-server.
	RedisMasters int
	// RedisSentinel (local tier only): Redis is a primary with two
	// replicas (AOF everysec) watched by three Sentinels, which the
	// binaries ask for the primary (DQ_REDIS_SENTINEL_*), instead of one
	// redis-server.
	RedisSentinel bool
	// DeferWorkers (local tier only): the work processes are set up (port,
	// environment, webhook) but not started; the test starts each with
	// Cluster.Start(t, Work, i). A work process declares the topics it
	// consumes worked when it starts, so a stopped one is not "no worker
	// yet" (TestBridge).
	DeferWorkers bool
}

func (s Spec) count(r Role) int {
	switch r {
	case Daemon:
		return s.Daemons
	case Event:
		return s.Events
	default:
		return s.Workers
	}
}

// Provisioner starts a delayq cluster for one test.
type Provisioner interface {
	Name() string
	// Start brings up Redis (AOF, appendfsync always), etcd, Kafka (topics
	// dq.tasks and dq.dead) and the instances spec asks for, each one
	// healthy, and registers their teardown with t.Cleanup.
	Start(t *testing.T, spec Spec) Cluster
}

// Cluster is a running delayq for one test. Instances are numbered from 0
// per role. Every method fails the test when it cannot do its job.
type Cluster interface {
	// DaemonURL is the base URL of daemon i's API.
	DaemonURL(i int) string
	// AdminURL is the base URL of an instance's HTTP server (/healthz,
	// /metrics; for the daemon the same as DaemonURL).
	AdminURL(role Role, i int) string
	// Brokers are Kafka bootstrap addresses reachable from the test.
	Brokers() []string
	// KafkaOpts are what a franz-go client of the test needs: the seed
	// brokers and, against a secured broker, TLS and SASL as a superuser.
	KafkaOpts() []kgo.Opt
	// Namespace is the DQ_NAMESPACE of this cluster.
	Namespace() string
	// Shards is the DQ_SHARDS of this cluster.
	Shards() int

	// Kill ends an instance with SIGKILL (a crash).
	Kill(t *testing.T, role Role, i int)
	// Stop ends an instance with SIGTERM and waits for its graceful exit.
	Stop(t *testing.T, role Role, i int)
	// Start starts a killed or stopped instance again with the same
	// settings and state directory, and waits until it is healthy.
	Start(t *testing.T, role Role, i int)

	// StopRedis stops Redis (an outage); StartRedis brings it back with its
	// data (AOF).
	StopRedis(t *testing.T)
	StartRedis(t *testing.T)

	// Disconnect cuts an instance off the network that connects it to
	// Redis, etcd and Kafka while it keeps running; the test can still
	// reach its AdminURL. Reconnect undoes it. Provisioners that cannot do
	// this fail the test.
	Disconnect(t *testing.T, role Role, i int)
	Reconnect(t *testing.T, role Role, i int)

	// Logs returns the tail of an instance's output, for failure messages.
	Logs(role Role, i int) string
}

// baseEnv is the environment every binary gets from either provisioner,
// before addresses: a namespace and consumer group unique to the test, few
// shards (leadership spreads faster), a short etcd session TTL (failover in
// seconds), text logs.
func baseEnv(ns string) map[string]string {
	return map[string]string{
		"DQ_NAMESPACE":        ns,
		"DQ_SHARDS":           strconv.Itoa(defaultShards),
		"DQ_LOG_FORMAT":       "text",
		"DQ_LOG_LEVEL":        "info",
		"DQ_SESSION_TTL":      "2s",
		"DQ_SHUTDOWN_TIMEOUT": "5s",
		"DQ_GROUP":            ns + "-work",
		"DQ_TOPICS":           "dq.tasks",
		"DQ_DEFAULT_TOPIC":    "dq.tasks",
	}
}

// defaultShards is DQ_SHARDS in the scenarios.
const defaultShards = 8

func merge(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func uniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// waitFor polls cond every 20ms until it holds or timeout passes, then
// fails the test with msg and the last reason cond gave.
func waitFor(t testing.TB, timeout time.Duration, msg string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s (last: %s)", timeout, msg, why)
		}
		<-tick.C
	}
}

// probe GETs url and reports whether it answered 2xx.
func probe(hc *http.Client, url string) (bool, string) {
	resp, err := hc.Get(url)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode/100 != 2 {
		return false, fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return true, ""
}

// metric reads one un-labelled sample (counter or gauge) from a Prometheus
// text page; ok is false when the page could not be read or has no sample.
func metric(hc *http.Client, baseURL, name string) (float64, bool) {
	resp, err := hc.Get(baseURL + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, name)), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// tailBuffer keeps the last 64 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - 64<<10; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

// Tail returns up to the last n bytes.
func (b *tailBuffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return string(s)
}
