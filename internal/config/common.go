package config

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Common are the settings every binary shares.
type Common struct {
	Namespace     string
	RedisAddrs    []string
	RedisCluster  bool // a Redis Cluster even with one address (a cluster's configuration endpoint)
	RedisUsername string
	RedisPassword string
	RedisTLS      TLSFiles
	// Redis Sentinel (redisha.go): with RedisSentinelAddrs the client asks
	// the sentinels for the primary named RedisSentinelMaster and follows
	// it; RedisAddrs is not used.
	RedisSentinelAddrs    []string
	RedisSentinelMaster   string
	RedisSentinelUsername string
	RedisSentinelPassword string
	RedisSentinelTLS      TLSFiles // unset: the sentinels are dialled with RedisTLS
	// How durable a write must be before it is acknowledged (redisha.go):
	// held by RedisReplicaAcks replicas (WAIT), and with RedisWaitAOF in
	// the AOF on disk (WAITAOF), within RedisAckTimeout.
	RedisReplicaAcks int
	RedisAckTimeout  time.Duration
	RedisWaitAOF     bool
	// HTTPTLS, when set, serves the binary's HTTP port (the daemon's API,
	// every binary's /healthz, /readyz, /metrics) over HTTPS.
	HTTPTLS       ServerFiles
	Shards        int
	HTTPAddr      string
	LogLevel      string
	LogFormat     string
	Retention     time.Duration
	ShutdownGrace time.Duration
}

// BindCommon registers the shared settings; httpDefault differs per binary.
func (c *Common) BindCommon(b *Binder, httpDefault string) {
	b.String(&c.Namespace, "namespace", "DQ_NAMESPACE", "dq", "namespace: key prefix in Redis and etcd")
	b.List(&c.RedisAddrs, "redis-addrs", "DQ_REDIS_ADDRS", "127.0.0.1:6379", "Redis address; more than one means Redis Cluster")
	b.Bool(&c.RedisCluster, "redis-cluster", "DQ_REDIS_CLUSTER", false, "Redis Cluster even with one address in redis-addrs (a cluster's configuration endpoint)")
	b.String(&c.RedisUsername, "redis-username", "DQ_REDIS_USERNAME", "", "Redis ACL user (empty: the default user)")
	b.Secret(&c.RedisPassword, "redis-password", "DQ_REDIS_PASSWORD", "", "Redis password (of the ACL user, or requirepass)")
	b.TLS(&c.RedisTLS, "redis", "DQ_REDIS", "Redis", true, true)
	c.bindRedisHA(b)
	b.ServerTLS(&c.HTTPTLS, "http", "DQ_HTTP", "the HTTP port")
	b.Int(&c.Shards, "shards", "DQ_SHARDS", 16, "shard count of a new namespace (an existing namespace keeps its own map; grow it with dq shards grow)")
	b.String(&c.HTTPAddr, "http-addr", "DQ_HTTP_ADDR", httpDefault, "HTTP listen address")
	b.String(&c.LogLevel, "log-level", "DQ_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	b.String(&c.LogFormat, "log-format", "DQ_LOG_FORMAT", "json", "log format: json or text")
	b.Duration(&c.Retention, "retention", "DQ_RETENTION", 24*time.Hour, "how long finished tasks stay readable")
	b.Duration(&c.ShutdownGrace, "shutdown-timeout", "DQ_SHUTDOWN_TIMEOUT", 15*time.Second, "how long a graceful shutdown may take")
}

// Validate checks the shared settings.
func (c *Common) Validate() error {
	if c.Namespace == "" || strings.ContainsAny(c.Namespace, "{}: \t\n/") || len(c.Namespace) > 64 {
		return fmt.Errorf("namespace %q: 1..64 characters without braces, colons, slashes or spaces", c.Namespace)
	}
	if len(c.RedisAddrs) == 0 {
		return fmt.Errorf("redis-addrs: at least one address")
	}
	if err := CheckAddrs("redis-addrs", "DQ_REDIS_ADDRS", "DQ_REDIS_USERNAME and DQ_REDIS_PASSWORD", c.RedisAddrs); err != nil {
		return err
	}
	if err := CheckAddrs("redis-sentinel-addrs", "DQ_REDIS_SENTINEL_ADDRS", "DQ_REDIS_SENTINEL_USERNAME and DQ_REDIS_SENTINEL_PASSWORD", c.RedisSentinelAddrs); err != nil {
		return err
	}
	if c.Shards < 1 || c.Shards > 4096 {
		return fmt.Errorf("shards %d: between 1 and 4096", c.Shards)
	}
	if c.Retention < time.Second {
		return fmt.Errorf("retention %s: at least 1s", c.Retention)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return fmt.Errorf("log-format %q: json or text", c.LogFormat)
	}
	if c.RedisUsername != "" && c.RedisPassword == "" {
		return errors.New("DQ_REDIS_USERNAME: set with DQ_REDIS_PASSWORD (an ACL user logs in with a password)")
	}
	if _, err := c.RedisTLS.Client(); err != nil {
		return err
	}
	if c.HTTPTLS.On() {
		if _, err := c.HTTPTLS.Load(); err != nil {
			return err
		}
	}
	return c.validateRedisHA()
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log-level %q: debug, info, warn or error", s)
	}
	return l, nil
}

// Logger builds the process logger (JSON on stderr by default).
func (c *Common) Logger(binary string) *slog.Logger {
	l, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
	if c.LogFormat == "text" {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	return slog.New(h).With("binary", binary)
}

// redisReadTimeout bounds every read from Redis; a command that blocks on
// the server (WAIT, WAITAOF) must return before it.
const redisReadTimeout = 3 * time.Second

// redisDialTimeout bounds a dial to a Redis node or sentinel.
const redisDialTimeout = 2 * time.Second

// RedisClient is RedisClientHA without its failover log and metrics: a
// standalone client for one address, a Sentinel client with
// RedisSentinelAddrs, a cluster client for several addresses or with
// RedisCluster, with the ACL user, password and TLS of the settings. An
// error names the setting at fault (a TLS file).
func (c *Common) RedisClient() (redis.UniversalClient, error) {
	rdb, _, err := c.RedisClientHA(nil)
	return rdb, err
}

// redisOptions are the settings every kind of client shares.
func (c *Common) redisOptions(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		// a copy: a cluster client appends the nodes it discovers
		Addrs:        slices.Clone(c.RedisAddrs),
		Username:     c.RedisUsername,
		Password:     c.RedisPassword,
		Dialer:       dial,
		DialTimeout:  redisDialTimeout,
		ReadTimeout:  redisReadTimeout,
		WriteTimeout: 3 * time.Second,
		MaxRetries:   2,
		// honour context deadlines while waiting on a stalled Redis, so a
		// caller's per-operation timeout really bounds the operation
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		// no CLIENT SETINFO on connect: a least-privilege ACL user
		// (internal/acl) need not be allowed it
		DisableIdentity: true,
	}
}

// redisDialer dials a Redis node (service "redis") or a sentinel ("redis
// sentinel"), over TLS when tlsc is set, and names the node in its
// errors: a TLS failure ("x509: certificate signed by unknown authority")
// says nothing of where it happened, and with Redis Cluster there are
// many nodes.
func redisDialer(tlsc *tls.Config, service string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: redisDialTimeout, KeepAlive: 5 * time.Minute}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var (
			conn net.Conn
			err  error
		)
		if tlsc == nil {
			conn, err = nd.DialContext(ctx, network, addr)
		} else {
			td := &tls.Dialer{NetDialer: nd, Config: tlsc}
			conn, err = td.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, &ConnError{Service: service, Addr: addr, Err: err}
		}
		if tlsc != nil {
			// With TLS 1.3 a server refuses a client certificate after
			// the client's handshake returned: the refusal ("remote
			// error: tls: certificate required") comes with the first
			// read, and must name the node too.
			return &namedConn{Conn: conn, service: service, addr: addr}, nil
		}
		return conn, nil
	}
}

// namedConn names the service and address in its read and write errors
// (but io.EOF, which callers compare with ==).
type namedConn struct {
	net.Conn
	service, addr string
}

func (c *namedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	return n, c.name(err)
}

func (c *namedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	return n, c.name(err)
}

func (c *namedConn) name(err error) error {
	if err == nil || err == io.EOF { //nolint:errorlint // io.EOF is returned unwrapped by contract
		return err
	}
	var de *ConnError
	if errors.As(err, &de) {
		return err
	}
	return &ConnError{Service: c.service, Addr: c.addr, Err: err}
}

// ConnError is a failed connection to a dependency (its dial, handshake
// or a read or write on it), naming it and the
// address: "tls: ... x509: certificate signed by unknown authority
// talking to redis at 127.0.0.1:6380".
type ConnError struct {
	Service, Addr string
	Err           error
}

func (e *ConnError) Error() string {
	return e.Err.Error() + " talking to " + e.Service + " at " + e.Addr
}

// Unwrap has the multi-error form on purpose: errors.Is and errors.As see
// the cause, but errors.Unwrap does not strip the ConnError, as go-redis
// does with an error of a new connection's handshake (HELLO), which would
// lose the node's address.
func (e *ConnError) Unwrap() []error { return []error{e.Err} }

// Timeout is the dial's own answer; a ConnError is a net.Error so that
// every "is it the network?" check (redisstore.IsUnavailable) takes a
// failed TLS handshake for what it is: the dependency cannot be reached,
// nothing about the data.
func (e *ConnError) Timeout() bool {
	var ne net.Error
	return errors.As(e.Err, &ne) && ne.Timeout()
}

// Temporary is true: a connection that failed may succeed once the
// dependency or the setting is fixed. Deprecated in net.Error, but part of
// it: without it a ConnError is no net.Error (see Timeout).
func (e *ConnError) Temporary() bool { return true }

// a ConnError is a net.Error (Timeout, Temporary)
var _ net.Error = (*ConnError)(nil)
