package testenv

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// stopTimeout bounds a clean shutdown before the child is killed.
const stopTimeout = 10 * time.Second

// startAttempts is how often a start is retried with new ports when a port
// picked by FreePort was taken before the server could bind it.
const startAttempts = 3

// Redis is a redis-server child process on a free 127.0.0.1 port, data in
// tb.TempDir().
type Redis struct {
	// Addr is "127.0.0.1:port".
	Addr string
	// Dir is the server's working directory (RDB, AOF, nodes.conf).
	Dir string

	opts RedisOptions
	port int
	args []string // full argument list; reused by Restart

	mu   sync.Mutex
	cmd  *process // the running child, nil before start and after Stop/Kill
	out  *tailBuffer
	name string // for messages: "redis-server 127.0.0.1:port"

	// how testenv itself logs in (readiness PING, cluster setup): the
	// client TLS config when opts.TLS is set, and testenv's admin ACL user
	// when opts.Users is set (else the default user with opts.Password)
	tlsConf                  *tls.Config
	adminUser, adminPassword string
}

// redisDir is a new directory for a server of o: on tmpfs with
// o.MemDir where /dev/shm takes one (removed at cleanup), else tb.TempDir().
func redisDir(tb testing.TB, o RedisOptions) string {
	tb.Helper()
	if o.MemDir {
		if d, err := os.MkdirTemp("/dev/shm", "dq-redis-"); err == nil {
			tb.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return tb.TempDir()
}

// RedisOptions configures StartRedis.
type RedisOptions struct {
	// AOF turns on the append-only file with appendfsync always (unless
	// AppendFsync says otherwise), so every acknowledged write survives
	// Kill+Restart. Without it persistence is
	// off (save "").
	AOF bool
	// AppendFsync is the appendfsync policy with AOF: "always" (the
	// default) or "everysec", which loses up to ~1 s of acknowledged
	// writes on an OS crash, and on a kill -9 of redis-server those it
	// had not written yet: Redis postpones its AOF writes (up to 2 s)
	// while a background fsync runs, and answers meanwhile
	// (docs/reliability.md).
	AppendFsync string
	// MemDir puts the server's directory on tmpfs (/dev/shm) where there
	// is one: its fsyncs cost nothing, so a test whose servers fsync
	// every write (appendfsync always) loads no disk that other tests'
	// servers share, and a kill -9 still loses nothing the server wrote.
	// For tests that do not simulate power loss.
	MemDir bool
	// ClusterNodeTimeout is cluster-node-timeout of a cluster's nodes (it
	// bounds failure detection, so a failover); default 5s,
	// StartRedisClusterReplicas' 2s. StartRedis ignores it.
	ClusterNodeTimeout time.Duration
	// Password sets requirepass; Client and the readiness check use it.
	// It cannot be combined with Users.
	Password string
	// TLS makes the server listen on TLS only (port 0, the TLS port in
	// Addr) with the PKI's server certificate, and require client
	// certificates signed by its CA.
	TLS *PKI
	// Users are ACL users created at start (see RedisUser). With any user
	// the default user is off, and testenv logs in (readiness, cluster
	// setup) as an extra user of its own, "testenv-admin" with a random
	// password and every permission.
	Users []RedisUser
	// Wrap runs the server under a command (its path and arguments come
	// after Wrap's), e.g. valgrind for BenchmarkRedisInstructions. A
	// wrapper must keep the server's process id (exec it): Kill signals it.
	Wrap []string
}

// redisBaseArgs are the settings every redis-server started by testenv runs
// with. The first four are delayq's recommended production config:
//
//   - save "" (only without AOF): no RDB snapshots; durability comes from AOF.
//   - maxmemory-policy noeviction: Redis must never silently drop a
//     scheduled task to free memory; a full Redis fails writes instead.
//   - hash-max-listpack-value 512 and hash-max-listpack-entries 256: task
//     hashes (payload included) stay in the compact listpack encoding.
//
// The rest make the server a well-behaved test child: loopback only, no
// protected mode, in the foreground, data in its own temp dir, and the DEBUG
// command enabled for local connections (DEBUG SLEEP simulates a slow Redis).
func redisBaseArgs(port int, dir string, opts RedisOptions) []string {
	args := []string{
		"--port", strconv.Itoa(port),
	}
	if opts.TLS != nil {
		args = []string{
			"--port", "0",
			"--tls-port", strconv.Itoa(port),
			"--tls-cert-file", opts.TLS.Server.Cert,
			"--tls-key-file", opts.TLS.Server.Key,
			"--tls-ca-cert-file", opts.TLS.Server.CA,
			"--tls-auth-clients", "yes",
		}
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--maxmemory-policy", "noeviction",
		"--hash-max-listpack-value", "512",
		"--hash-max-listpack-entries", "256",
		"--enable-debug-command", "local",
	)
	if len(opts.Users) > 0 {
		args = append(args, "--aclfile", filepath.Join(dir, aclFileName))
	}
	if opts.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", cmp.Or(opts.AppendFsync, "always"))
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	if opts.Password != "" {
		args = append(args, "--requirepass", opts.Password)
	}
	return args
}

// StartRedis starts a redis-server on a free loopback port with its data in
// tb.TempDir() and waits until it answers PING. At most one RedisOptions is
// used. The server is killed at cleanup.
func StartRedis(tb testing.TB, opts ...RedisOptions) *Redis {
	tb.Helper()
	var o RedisOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	r := &Redis{Dir: redisDir(tb, o), opts: o}
	r.secure(tb, randomSecret())
	r.start(tb, func(port int) []string { return redisBaseArgs(port, r.Dir, o) })
	return r
}

// redisServerPath returns the redis-server binary or fails the test.
func redisServerPath(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("testenv: redis-server not found in PATH: apt-get install redis-server (%v)", err)
	}
	return path
}

// start picks a port, starts the child with argsFor(port) and waits for
// PING, retrying with a new port when the port turned out to be taken.
func (r *Redis) start(tb testing.TB, argsFor func(port int) []string) {
	tb.Helper()
	path := redisServerPath(tb)
	tb.Cleanup(func() { r.killQuietly() })
	for attempt := 1; ; attempt++ {
		port := FreePort(tb)
		r.port = port
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		r.name = "redis-server " + r.Addr
		r.args = argsFor(port)
		err := r.launch(path)
		if err == nil {
			return
		}
		if attempt < startAttempts && r.out.contains("Address already in use") {
			tb.Logf("testenv: %s: port taken, retrying with another port", r.name)
			continue
		}
		tb.Fatalf("testenv: start %s (dir %s): %v\n--- output tail ---\n%s", r.name, r.Dir, err, r.out.tail())
	}
}

// launch starts the child with r.args and waits until it answers PING.
func (r *Redis) launch(path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil && !r.cmd.exited() {
		return fmt.Errorf("already running")
	}
	r.out = new(tailBuffer)
	name, args := path, r.args
	if w := r.opts.Wrap; len(w) > 0 {
		name, args = w[0], append(append(slices.Clone(w[1:]), path), r.args...)
	}
	p, err := startProcess(name, args, r.out)
	if err != nil {
		return err
	}
	r.cmd = p
	var pingErr error
	ready := poll(startTimeout, func() bool {
		if p.exited() {
			return true
		}
		pingErr = redisPing(r.Addr, r.tlsConf, r.adminUser, r.adminPassword)
		return pingErr == nil
	})
	switch {
	case p.exited():
		return fmt.Errorf("exited before answering PING: %v", p.err) //nolint:errorlint // p.err is nil when redis-server exited 0 (%w would print %!w(<nil>))
	case !ready:
		p.kill()
		return fmt.Errorf("no PING answer within %v (last error: %w); killed", startTimeout, pingErr)
	}
	return nil
}

// Stop shuts the server down cleanly (SIGTERM) and waits for it to exit.
// With AOF the data persists for Restart. Stopping a stopped server is a
// no-op.
func (r *Redis) Stop(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	if err := r.cmd.stop(syscall.SIGTERM, stopTimeout); err != nil {
		tb.Fatalf("testenv: stop %s: %v\n--- output tail ---\n%s", r.name, err, r.out.tail())
	}
	r.cmd = nil
}

// Kill sends SIGKILL and waits for the server to exit: a crash. With AOF
// (appendfsync always) every acknowledged write survives Restart.
func (r *Redis) Kill(tb testing.TB) {
	tb.Helper()
	r.killQuietly()
}

func (r *Redis) killQuietly() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	r.cmd.kill()
	r.cmd = nil
}

// Restart starts the server again on the same port and directory (stopping
// it first with SIGKILL if it still runs) and waits until it answers PING.
// Clients returned by Client reconnect on their own.
func (r *Redis) Restart(tb testing.TB) {
	tb.Helper()
	r.killQuietly()
	if err := r.launch(redisServerPath(tb)); err != nil {
		tb.Fatalf("testenv: restart %s (dir %s): %v\n--- output tail ---\n%s", r.name, r.Dir, err, r.out.tail())
	}
}

// Output returns the tail of the server's stdout and stderr since it was
// last (re)started.
func (r *Redis) Output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.out == nil {
		return ""
	}
	return r.out.tail()
}

// Client returns a go-redis client for the server, closed at cleanup. With
// RedisOptions.Users it logs in as Users[0], with RedisOptions.TLS it
// connects over TLS with the PKI's client certificate.
func (r *Redis) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	user, password := "", r.opts.Password
	if len(r.opts.Users) > 0 {
		user, password = r.opts.Users[0].Name, r.opts.Users[0].Password
	}
	return r.ClientAs(tb, user, password)
}

// redisPing sends PING (after AUTH when password is set, as user when that
// is set too) over a fresh connection, a TLS one when tlsConf is set, and
// reports an error unless the reply is +PONG.
func redisPing(addr string, tlsConf *tls.Config, user, password string) error {
	d := &net.Dialer{Timeout: 200 * time.Millisecond}
	var conn net.Conn
	var err error
	if tlsConf != nil {
		conn, err = tls.DialWithDialer(d, "tcp", addr, tlsConf)
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	req := "*1\r\n$4\r\nPING\r\n"
	switch {
	case user != "":
		req = fmt.Sprintf("*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(user), user, len(password), password) + req
	case password != "":
		req = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password) + req
	}
	if _, err := conn.Write([]byte(req)); err != nil {
		return err
	}
	rd := bufio.NewReader(conn)
	if password != "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("AUTH: %s", strings.TrimSpace(line))
		}
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	// While loading the AOF the server answers -LOADING; keep polling.
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING: %s", strings.TrimSpace(line))
	}
	return nil
}

// RedisCPU is the CPU time a redis-server used so far (INFO cpu,
// used_cpu_user + used_cpu_sys): benchmarks read it around a phase to
// report Redis' own cost per task, which hardly depends on what else the
// machine runs.
func RedisCPU(tb testing.TB, rdb redis.UniversalClient) time.Duration {
	tb.Helper()
	info, err := rdb.Info(context.WithoutCancel(tb.Context()), "cpu").Result()
	if err != nil {
		tb.Fatalf("testenv: INFO cpu: %v", err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}
