package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/testenv"
)

// crashProxy forwards connections to a Redis node until it is armed and
// has forwarded a script call; then the next reply from Redis is dropped,
// every connection is cut and the proxy stops listening: a master that ran
// the call and died before it answered, then refuses connections (killed,
// not yet failed over).
type crashProxy struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	sent   atomic.Bool // armed, and a script call went to Redis

	mu      sync.Mutex
	conns   []net.Conn
	crashed chan struct{}
	once    sync.Once
}

func startCrashProxy(t *testing.T, target string) *crashProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &crashProxy{ln: ln, target: target, crashed: make(chan struct{})}
	go p.accept()
	t.Cleanup(p.crash)
	return p
}

func (p *crashProxy) Addr() string { return p.ln.Addr().String() }

func (p *crashProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.commands(c, s)
		go p.replies(c, s)
	}
}

// commands forwards the client's commands and notes an armed proxy's
// script call.
func (p *crashProxy) commands(c, s net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if p.armed.Load() && bytes.Contains(bytes.ToLower(buf[:n]), []byte("eval")) {
				p.sent.Store(true)
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			s.Close()
			return
		}
	}
}

// replies forwards Redis' replies until the armed proxy forwarded a
// script call.
func (p *crashProxy) replies(c, s net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 && p.sent.Load() {
			p.crash() // the command ran; its reply is lost with the node
			return
		}
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			c.Close()
			return
		}
	}
}

// crash marks the proxy crashed, then cuts it: a client that sees its
// connection cut finds crashed closed (closed last, a loaded machine let a
// test read it between the cut and the close: "never reached the proxy").
func (p *crashProxy) crash() {
	p.once.Do(func() {
		close(p.crashed)
		p.ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
}

// A schedule that reached Redis and ran, whose node then died before it
// answered, must never be reported as not run (NotRun): the daemon would
// journal it as never written and its replay would write the task's
// journaled content again over any change made since (a reschedule
// through another daemon). go-redis' own retries hid that: the first
// attempt's connection reset was followed by a resend whose dial was
// refused, and the refused dial was the error returned (chaos seed
// 794849177). Each of the store's paths is covered: a pipeline (one
// redis-server), the pipeline with WAIT (replica acks) and a Redis
// Cluster command.
func TestScheduleThatRanIsNeverReportedNotRun(t *testing.T) {
	opts := func(addr string) *redis.Options {
		// the daemon's settings (config.redisOptions): retries on
		return &redis.Options{Addr: addr, MaxRetries: 2, DialTimeout: time.Second, ReadTimeout: 2 * time.Second}
	}
	check := func(t *testing.T, rdb redis.UniversalClient, direct redis.UniversalClient, o Options, proxyOf func(s *Store) *crashProxy) {
		t.Helper()
		s := newStore(t, rdb, o)
		p := proxyOf(s)
		due := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
		// loads the script on the node (EVALSHA answers NOSCRIPT otherwise)
		// and fills the pool: an id of the same shard
		warm := "once-0"
		for i := 0; s.Shard(warm) != s.Shard("once-1"); i++ {
			warm = fmt.Sprintf("once-0-%d", i)
		}
		if r := schedule1(t, s, mk(warm, due)); r.Outcome != Created {
			t.Fatalf("first schedule: %+v", r)
		}
		p.armed.Store(true)
		res, err := s.Schedule(t.Context(), []Submit{{Task: mk("once-1", due)}})
		select {
		case <-p.crashed:
		case <-time.After(10 * time.Second):
			t.Fatalf("the schedule never reached the proxy: %v %+v", err, res)
		}
		rerr := err
		if len(res) == 1 && res[0].Err != nil {
			rerr = res[0].Err
		}
		if rerr == nil {
			t.Fatalf("the schedule succeeded although its reply was lost: %+v", res)
		}
		if !IsUnavailable(rerr) {
			t.Errorf("a lost reply is not unavailable: %v", rerr)
		}
		if NotRun(rerr) {
			t.Errorf("the schedule ran but its error says it did not: %v", rerr)
		}
		// it did run: the task is in Redis
		sh := s.Shard("once-1")
		if ok, err := direct.HExists(context.Background(), s.k.bucket(sh, "once-1"), "once-1").Result(); err != nil || !ok {
			t.Fatalf("the task is not in Redis (%v, %v): the proxy did not let the command through", ok, err)
		}
	}

	t.Run("one server", func(t *testing.T) {
		r := testenv.StartRedis(t)
		p := startCrashProxy(t, r.Addr)
		rdb := redis.NewClient(opts(p.Addr()))
		t.Cleanup(func() { _ = rdb.Close() })
		check(t, rdb, r.Client(t), Options{Shards: 4}, func(*Store) *crashProxy { return p })
	})
	t.Run("replica acks", func(t *testing.T) {
		primary, _ := replicated(t)
		p := startCrashProxy(t, primary.Addr)
		rdb := redis.NewClient(opts(p.Addr()))
		t.Cleanup(func() { _ = rdb.Close() })
		check(t, rdb, primary.Client(t), Options{Shards: 4, ReplicaAcks: 1, AckTimeout: time.Second},
			func(*Store) *crashProxy { return p })
	})
	t.Run("cluster", func(t *testing.T) {
		c := testenv.StartRedisCluster(t)
		direct := c.Client(t)
		// every node's connections go through its own proxy
		var mu sync.Mutex
		proxies := map[string]*crashProxy{}
		for _, a := range c.Addrs {
			proxies[a] = startCrashProxy(t, a)
		}
		d := &net.Dialer{Timeout: time.Second}
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRetries: 2, ReadTimeout: 2 * time.Second,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				mu.Lock()
				p := proxies[addr]
				mu.Unlock()
				if p != nil {
					addr = p.Addr()
				}
				return d.DialContext(ctx, network, addr)
			}})
		t.Cleanup(func() { _ = cc.Close() })
		check(t, cc, direct, Options{Shards: 4}, func(s *Store) *crashProxy {
			// the master of the task's shard
			return proxies[c.SlotOwner(t, c.SlotOf(t, s.k.due(s.Shard("once-1"))))]
		})
	})
}
