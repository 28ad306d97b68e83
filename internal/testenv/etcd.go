package testenv

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Etcd is an in-process etcd server (go.etcd.io/etcd/server/v3/embed) on
// free loopback ports, data in tb.TempDir().
type Etcd struct {
	// Endpoints are the client endpoints without scheme ("127.0.0.1:port"),
	// ready for clientv3.Config.Endpoints.
	Endpoints []string
	// ClientURL is the client URL with scheme ("http://127.0.0.1:port",
	// "https://..." with EtcdOptions.TLS); clientv3 accepts it too.
	ClientURL string
	// PeerURL is the advertised raft peer URL ("http://127.0.0.1:port").
	PeerURL string
	// Dir is the data directory, kept across Stop and Restart.
	Dir string
	// Server is the running server; nil while stopped.
	Server *embed.Etcd

	backendURL     string // where the server itself listens for clients
	peerBackendURL string // where the server itself listens for peers
	proxy          *Proxy // forwards Endpoints to backendURL while running
	peerProxy      *Proxy // forwards PeerURL to peerBackendURL while running
	name           string
	initialCluster string
	token          string
	logs           *tailBuffer // etcd's error-level log, quoted in failures
	opts           EtcdOptions

	mu sync.Mutex
}

// newEtcdMember returns a member with free ports and a data dir under parent.
func newEtcdMember(tb testing.TB, name, parent string) *Etcd {
	tb.Helper()
	return newEtcdMemberWith(tb, name, parent, EtcdOptions{})
}

// newEtcdMemberWith is newEtcdMember with the options o.
func newEtcdMemberWith(tb testing.TB, name, parent string, o EtcdOptions) *Etcd {
	tb.Helper()
	e := &Etcd{name: name, Dir: filepath.Join(parent, name), logs: new(tailBuffer), opts: o}
	e.pickPorts(tb)
	return e
}

func (e *Etcd) pickPorts(tb testing.TB) {
	tb.Helper()
	scheme := "http://"
	if e.opts.TLS != nil {
		scheme = "https://"
	}
	client := "127.0.0.1:" + strconv.Itoa(FreePort(tb))
	e.Endpoints = []string{client}
	e.ClientURL = scheme + client
	e.backendURL = scheme + "127.0.0.1:" + strconv.Itoa(FreePort(tb))
	e.PeerURL = "http://127.0.0.1:" + strconv.Itoa(FreePort(tb))
	e.peerBackendURL = "http://127.0.0.1:" + strconv.Itoa(FreePort(tb))
}

// config builds the embed config: silent zap logger (errors go to e.logs),
// no fsync (test data need not survive a machine crash), default tick and
// election timings. The server listens on the backend URLs and advertises
// ClientURL and PeerURL, the proxies in front of them.
func (e *Etcd) config() (*embed.Config, error) {
	var lcurl, acurl, lpurl, apurl *url.URL
	for _, u := range []struct {
		dst **url.URL
		raw string
	}{{&lcurl, e.backendURL}, {&acurl, e.ClientURL}, {&lpurl, e.peerBackendURL}, {&apurl, e.PeerURL}} {
		parsed, err := url.Parse(u.raw)
		if err != nil {
			return nil, err
		}
		*u.dst = parsed
	}
	cfg := embed.NewConfig()
	cfg.Name = e.name
	cfg.Dir = e.Dir
	cfg.ListenClientUrls = []url.URL{*lcurl}
	cfg.AdvertiseClientUrls = []url.URL{*acurl}
	cfg.ListenPeerUrls = []url.URL{*lpurl}
	cfg.AdvertisePeerUrls = []url.URL{*apurl}
	cfg.InitialCluster = e.initialCluster
	cfg.InitialClusterToken = e.token
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.AddSync(e.logs),
		zap.ErrorLevel,
	)))
	if p := e.opts.TLS; p != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       p.Server.Cert,
			KeyFile:        p.Server.Key,
			TrustedCAFile:  p.Server.CA,
			ClientCertAuth: true,
		}
	}
	// bcrypt's cheapest cost (bcrypt.MinCost; golang.org/x/crypto is no
	// direct dependency): the default (10) makes every Authenticate take
	// ~50ms (more under -race), and test passwords guard nothing
	cfg.BcryptCost = 4
	return cfg, nil
}

// launch starts the server without waiting for it to join the cluster.
func (e *Etcd) launch() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.Server != nil {
		return errors.New("already running")
	}
	cfg, err := e.config()
	if err != nil {
		return err
	}
	peerProxy, err := StartProxy(hostPort(e.PeerURL), hostPort(e.peerBackendURL))
	if err != nil {
		return fmt.Errorf("peer proxy: %w", err)
	}
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		peerProxy.Close()
		return err
	}
	proxy, err := StartProxy(e.Endpoints[0], hostPort(e.backendURL))
	if err != nil {
		stopServer(srv) // not ready yet: a plain Close would hang
		peerProxy.Close()
		return fmt.Errorf("client proxy: %w", err)
	}
	e.Server, e.proxy, e.peerProxy = srv, proxy, peerProxy
	return nil
}

func hostPort(rawURL string) string {
	_, hp, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	return hp
}

// waitReady waits until the server has joined its cluster and serves
// clients.
func (e *Etcd) waitReady(timeout time.Duration) error {
	e.mu.Lock()
	srv := e.Server
	e.mu.Unlock()
	if srv == nil {
		return errors.New("not running")
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-srv.Server.ReadyNotify():
		return nil
	case err := <-srv.Err():
		return fmt.Errorf("server error: %w", err)
	case <-timer.C:
		return fmt.Errorf("not ready within %v", timeout)
	}
}

// close stops the server if it runs: first the client proxy, which cuts
// every client connection, then the server, which then has no client
// streams to wait for, and last the peer proxy, which cuts the keep-alive
// HTTP connections between members that etcd itself leaves open (their
// goroutines would otherwise outlive the test and trip goleak).
func (e *Etcd) close() {
	e.mu.Lock()
	srv, proxy, peerProxy := e.Server, e.proxy, e.peerProxy
	e.Server, e.proxy, e.peerProxy = nil, nil, nil
	e.mu.Unlock()
	if proxy != nil {
		proxy.Close()
	}
	var wg sync.WaitGroup
	if srv != nil {
		if peerProxy != nil {
			// Once raft stopped (after any leadership hand-over), cut the
			// peer connections; Close would otherwise wait 1s for them to go
			// idle, which they never do.
			stopped := srv.Server.StopNotify()
			wg.Go(func() {
				<-stopped
				peerProxy.Close()
			})
		}
		stopServer(srv) // raft is stopped once it returns
	}
	wg.Wait()
	if peerProxy != nil {
		peerProxy.Close()
	}
}

// stopServer closes an embedded server, ready or not. embed's Close first
// waits for its client servers, and they wait for the server to be ready
// or stopping: a member that never became ready (its cluster never reached
// quorum, or launch gave up on it because a port was taken and
// StartEtcdCluster retries) would hang Close for good. Stopping the server
// first lets them end.
func stopServer(srv *embed.Etcd) {
	select {
	case <-srv.Server.ReadyNotify():
	default:
		srv.Server.HardStop()
	}
	srv.Close()
}

func (e *Etcd) fail(tb testing.TB, what string, err error) {
	tb.Helper()
	tb.Fatalf("testenv: %s etcd %s (client %s, peer %s, dir %s): %v\n--- etcd error log tail ---\n%s",
		what, e.name, e.ClientURL, e.PeerURL, e.Dir, err, e.logs.tail())
}

// StartEtcd starts a single-member etcd server on free loopback ports with
// its data in tb.TempDir() and waits until it is ready. It is closed at
// cleanup.
func StartEtcd(tb testing.TB) *Etcd {
	tb.Helper()
	return StartEtcdWith(tb, EtcdOptions{})
}

// StartEtcdWith is StartEtcd with client TLS and auth as o says.
func StartEtcdWith(tb testing.TB, o EtcdOptions) *Etcd {
	tb.Helper()
	c := StartEtcdClusterWith(tb, 1, o)
	return c.Members[0]
}

// Stop closes the server, simulating an etcd outage: client connections are
// cut at once and new ones are refused until Restart. Stopping a stopped
// server is a no-op. Stopping the leader of a multi-member cluster first
// hands leadership to another member, as etcd does on SIGTERM.
//
// Client traffic reaches the server through an in-process TCP proxy on
// Endpoints (and peer traffic through one on PeerURL): embed.Etcd.Close
// alone waits for open client streams (watches, the lease keep-alive of a
// concurrency.Session) for etcd's request timeout, 5s + 2×election timeout
// = 7s, before it cuts them. Closing the proxy first makes Stop take
// milliseconds.
func (e *Etcd) Stop(tb testing.TB) {
	tb.Helper()
	e.close()
}

// Restart starts the server again on the same ports and data dir and waits
// until it is ready. A cluster member only becomes ready once a quorum is up;
// to bring back several members of a cluster that lost quorum use
// EtcdCluster.Restart.
func (e *Etcd) Restart(tb testing.TB) {
	tb.Helper()
	if err := e.launch(); err != nil {
		e.fail(tb, "restart", err)
	}
	if err := e.waitReady(startTimeout); err != nil {
		e.fail(tb, "restart", err)
	}
}

// Client returns a clientv3 client for this server, closed at cleanup. With
// EtcdOptions.TLS it connects over TLS with the PKI's client certificate,
// with EtcdOptions.RootPassword it logs in as root.
func (e *Etcd) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	return newEtcdClient(tb, e.Endpoints, e.opts, rootUser(e.opts), e.opts.RootPassword)
}

// newEtcdClient returns a silent clientv3 client closed at cleanup, over
// TLS with the PKI's client certificate when o.TLS is set, logged in as
// user when that is set. Its gRPC reconnect backoff is capped at 500ms
// (gRPC's default grows to 120s), so after Restart the client is usable
// again within a second.
func newEtcdClient(tb testing.TB, endpoints []string, o EtcdOptions, user, password string) *clientv3.Client {
	tb.Helper()
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		Username:    user,
		Password:    password,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  50 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   500 * time.Millisecond,
			},
			MinConnectTimeout: time.Second,
		})},
	}
	if o.TLS != nil {
		cfg.TLS = o.TLS.ClientTLS(tb)
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		tb.Fatalf("testenv: etcd client for %v: %v", endpoints, err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// EtcdCluster is an n-member embedded etcd cluster, for quorum-loss tests.
type EtcdCluster struct {
	// Members are the servers; Stop a majority to lose quorum.
	Members []*Etcd
	// Endpoints are all members' client endpoints ("127.0.0.1:port").
	Endpoints []string

	opts EtcdOptions
}

// StartEtcdCluster starts an n-member etcd cluster on free loopback ports,
// each member with its own data dir under tb.TempDir(), and waits until all
// members are ready. The members are closed at cleanup.
func StartEtcdCluster(tb testing.TB, n int) *EtcdCluster {
	tb.Helper()
	return StartEtcdClusterWith(tb, n, EtcdOptions{})
}

// StartEtcdClusterWith is StartEtcdCluster with client TLS and auth as o
// says (see EtcdOptions); peers talk plain HTTP.
func StartEtcdClusterWith(tb testing.TB, n int, o EtcdOptions) *EtcdCluster {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("testenv: StartEtcdCluster: need at least one member, got %d", n)
	}
	dir := tb.TempDir()
	if len(o.Users) > 0 && o.RootPassword == "" {
		tb.Fatalf("testenv: EtcdOptions: Users need RootPassword (etcd enables auth only with a root user)")
	}
	c := &EtcdCluster{opts: o}
	tb.Cleanup(func() { closeMembers(c.Members) })
	for attempt := 1; ; attempt++ {
		c.Members = c.Members[:0]
		peers := make([]string, 0, n)
		for i := range n {
			m := newEtcdMemberWith(tb, "m"+strconv.Itoa(i), filepath.Join(dir, "try"+strconv.Itoa(attempt)), o)
			c.Members = append(c.Members, m)
			peers = append(peers, m.name+"="+m.PeerURL)
		}
		token := fmt.Sprintf("testenv-%d-%d", time.Now().UnixNano(), attempt)
		for _, m := range c.Members {
			m.initialCluster = strings.Join(peers, ",")
			m.token = token
		}
		err := c.launchAll(c.Members)
		if err != nil && attempt < startAttempts && isAddrInUse(err) {
			tb.Logf("testenv: etcd: port taken, retrying with other ports: %v", err)
			closeMembers(c.Members)
			continue
		}
		if err != nil {
			tb.Fatalf("testenv: start %d-member etcd cluster: %v", n, err)
		}
		break
	}
	c.Endpoints = nil
	for _, m := range c.Members {
		c.Endpoints = append(c.Endpoints, m.Endpoints...)
	}
	if o.RootPassword != "" {
		enableEtcdAuth(tb, c.Endpoints, o)
	}
	return c
}

// launchAll starts members and waits until all are ready. Members of a
// multi-member cluster must be started together: none is ready before a
// quorum runs.
func (c *EtcdCluster) launchAll(members []*Etcd) error {
	for _, m := range members {
		if err := m.launch(); err != nil {
			return fmt.Errorf("member %s (client %s, peer %s): %w", m.name, m.ClientURL, m.PeerURL, err)
		}
	}
	deadline := time.Now().Add(startTimeout)
	for _, m := range members {
		if err := m.waitReady(time.Until(deadline)); err != nil {
			return fmt.Errorf("member %s (client %s, peer %s): %w\n--- etcd error log tail ---\n%s",
				m.name, m.ClientURL, m.PeerURL, err, m.logs.tail())
		}
	}
	return nil
}

// closeMembers closes the followers in parallel, then the leader. A leader
// hands leadership to a live peer before it stops; closing it together with
// its followers makes that hand-over wait for etcd's request timeout (7s).
func closeMembers(members []*Etcd) {
	var followers, leaders []*Etcd
	for _, m := range members {
		m.mu.Lock()
		srv := m.Server
		m.mu.Unlock()
		if srv != nil && srv.Server.Leader() == srv.Server.MemberID() {
			leaders = append(leaders, m)
		} else {
			followers = append(followers, m)
		}
	}
	var wg sync.WaitGroup
	for _, m := range followers {
		wg.Go(m.close)
	}
	wg.Wait()
	for _, m := range leaders {
		m.close()
	}
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

// Restart starts the given stopped members (indexes into Members) together
// and waits until all are ready; use it to recover from quorum loss.
func (c *EtcdCluster) Restart(tb testing.TB, members ...int) {
	tb.Helper()
	ms := make([]*Etcd, 0, len(members))
	for _, i := range members {
		if i < 0 || i >= len(c.Members) {
			tb.Fatalf("testenv: EtcdCluster.Restart: no member %d (have %d)", i, len(c.Members))
		}
		ms = append(ms, c.Members[i])
	}
	if err := c.launchAll(ms); err != nil {
		tb.Fatalf("testenv: restart etcd members %v: %v", members, err)
	}
}

// Client returns a clientv3 client for all members, closed at cleanup; TLS
// and user as for Etcd.Client.
func (c *EtcdCluster) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	return newEtcdClient(tb, c.Endpoints, c.opts, rootUser(c.opts), c.opts.RootPassword)
}
