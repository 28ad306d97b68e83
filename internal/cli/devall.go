//go:build !dqslim

package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/cli/acl"
	"github.com/delayq/delayq/internal/cli/devcert"
	"github.com/delayq/delayq/internal/config"
)

// devOptions configures dq dev.
type devOptions struct {
	dir     string // data directory; "" = a temporary one, removed at exit
	apiAddr string
	shards  int
	webhook string // "" = the built-in sink
	demo    bool
	verbose bool
	redis   string // redis-server binary
	topics  string // extra topics (comma-separated): created at start, consumed by work
	tls     bool   // TLS, ACL users and SASL everywhere (devSecurity)
}

// devNamespace is dq dev's namespace.
const devNamespace = "dq"

// devPartitions is the partition count of every topic dq dev creates.
const devPartitions = 4

// devTopics are the topics dq dev creates at start and its worker
// consumes: dq.tasks and the given extra ones (dq.dead is created too,
// and any other topic on first use).
func devTopics(extra string) []string {
	out := []string{"dq.tasks"}
	for _, t := range config.Split(extra) {
		if !slices.Contains(out, t) && t != "dq.dead" {
			out = append(out, t)
		}
	}
	return out
}

// redisInstallHint is printed when redis-server is missing.
const redisInstallHint = `redis-server is not installed. Install it with:
    sudo apt-get install -y redis-server     # Debian, Ubuntu
    brew install redis                       # macOS
or run "make dev", which installs it through apt when it is missing.`

// runDevAll is dq dev: delayq in one process — a redis-server child, an
// embedded etcd, an embedded Kafka-protocol broker (kfake), and the
// daemon, event and work applications — for trying it out.
func runDevAll(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("dev", env)
	var o devOptions
	fs.StringVar(&o.dir, "dir", "", "keep Redis, etcd and the journal here across runs (default: a temporary directory, removed at exit)")
	fs.StringVar(&o.apiAddr, "api-addr", "127.0.0.1:7070", "address of the daemon's API")
	fs.IntVar(&o.shards, "shards", 16, "number of shards")
	fs.StringVar(&o.webhook, "webhook", "", "deliver tasks to this URL (default: a built-in receiver that prints each task)")
	fs.BoolVar(&o.demo, "demo", false, "schedule a few tasks and show them firing")
	fs.BoolVar(&o.verbose, "verbose", false, "show the applications' info logs (default: warnings and errors)")
	fs.StringVar(&o.redis, "redis-server", "redis-server", "the redis-server binary")
	fs.StringVar(&o.topics, "topics", "", "more Kafka topics to create at start and consume besides dq.tasks (comma-separated, e.g. a,b); any other topic is created on first use")
	fs.BoolVar(&o.tls, "tls", false, "secured connections: a throwaway CA in DIR/tls, Redis on TLS only with ACL user delayq (default user off), etcd on TLS with client certificates and authentication, Kafka on TLS with SASL SCRAM-SHA-256, the API on HTTPS; prints the settings another process needs")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	return devAll(ctx, env, o, nil)
}

// devAll runs the system until ctx ends. ready, when not nil, receives the
// API URL once everything is up (tests).
func devAll(ctx context.Context, env Env, o devOptions, ready func(apiURL string)) (err error) {
	redisPath, lookErr := exec.LookPath(o.redis)
	if lookErr != nil {
		return errors.New(redisInstallHint) //nolint:staticcheck // ST1005: a multi-line install hint printed as is, never wrapped
	}
	out := &lockedWriter{w: env.Stdout}
	say := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }

	s := &devSystem{topics: devTopics(o.topics)}
	defer s.stop()
	if err := s.prepareDir(o); err != nil {
		return err
	}
	if err := s.startInfra(ctx, redisPath); err != nil {
		return err
	}
	if err := s.startSink(ctx, o.webhook, out); err != nil {
		return err
	}
	ports, err := devPorts(o.apiAddr)
	if err != nil {
		return err
	}
	scheme, hc := "http", http.DefaultClient
	if s.sec != nil {
		scheme, hc = "https", s.sec.httpClient()
	}
	appsCtx, stopApps := context.WithCancel(ctx)
	defer stopApps()
	g, gctx := errgroup.WithContext(appsCtx)
	runDevApps(gctx, g, env, s.appEnv(o), ports)
	// Wait for the three applications, then say where everything is.
	if upErr := waitHealthy(gctx, scheme, hc, ports); upErr != nil {
		stopApps()
		if err := g.Wait(); err != nil {
			return err
		}
		return upErr
	}
	api := scheme + "://" + ports["daemon"]
	s.banner(say, api, scheme, ports)
	if ready != nil {
		ready(api)
	}
	if o.demo {
		cl := client.New(api)
		if s.sec != nil {
			cl = client.New(api, client.WithHTTPClient(hc))
		}
		g.Go(func() error { return devDemo(gctx, cl, say) })
	}
	err = g.Wait()
	say("delayq stopped")
	return err
}

// devSystem is what dq dev started besides the applications; stop undoes
// it in the reverse order.
type devSystem struct {
	dir          string       // the data directory
	sec          *devSecurity // nil without --tls
	topics       []string     // created at start, consumed by work
	redisAddr    string
	etcdEndpoint string
	brokers      string
	webhook      string // where work delivers tasks
	delivered    atomic.Int64
	stops        []func()
}

// onStop adds f to what stop runs.
func (s *devSystem) onStop(f func()) { s.stops = append(s.stops, f) }

// stop runs what onStop added, the last first.
func (s *devSystem) stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// prepareDir makes the data directory (a temporary one, removed at stop,
// when o names none) and, with --tls, the throwaway CA in it.
func (s *devSystem) prepareDir(o devOptions) error {
	dir := o.dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "dq-dev-"); err != nil {
			return err
		}
		s.onStop(func() { _ = os.RemoveAll(dir) })
	}
	for _, sub := range []string{"redis", "etcd", "journal"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}
	s.dir = dir
	if !o.tls {
		return nil
	}
	var err error
	if s.dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	s.sec, err = newDevSecurity(filepath.Join(s.dir, "tls"), o.apiAddr)
	return err
}

// startInfra starts Redis (a child process with delayq's recommended
// settings), the embedded etcd and the embedded Kafka broker.
func (s *devSystem) startInfra(ctx context.Context, redisPath string) error {
	redisAddr, stopRedis, err := startDevRedis(ctx, redisPath, filepath.Join(s.dir, "redis"), s.sec)
	if err != nil {
		return err
	}
	s.onStop(stopRedis)
	s.redisAddr = redisAddr

	eo := EtcdOptions{Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:0", DataDir: filepath.Join(s.dir, "etcd"), Name: "dq-dev"}
	if sec := s.sec; sec != nil {
		eo.CertFile, eo.KeyFile, eo.ClientCAFile = sec.certs.Server.Cert, sec.certs.Server.Key, sec.certs.Server.CA
		eo.RootPassword = sec.etcdRoot
		eo.Users = []EtcdUser{{Name: devUser, Password: sec.etcd, Prefix: acl.EtcdPrefix(devNamespace)}}
	}
	etcd, err := StartEtcd(ctx, eo)
	if err != nil {
		return err
	}
	s.onStop(etcd.Close)
	s.etcdEndpoint = strings.TrimPrefix(etcd.Config().ListenClientUrls[0].String(), "http://")

	ko := KafkaOptions{Listen: "127.0.0.1:0", Partitions: devPartitions, Topics: append(slices.Clone(s.topics), "dq.dead", "dq.outcomes")}
	if sec := s.sec; sec != nil {
		ko.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{sec.server}}
		ko.Users = []KafkaUser{{Mechanism: config.SASLScramSHA256, Name: devUser, Password: sec.kafka}}
	}
	kafka, err := StartKafka(ko)
	if err != nil {
		return err
	}
	s.onStop(kafka.Close)
	s.brokers = kafka.Advertised
	return nil
}

// startSink starts the built-in webhook receiver, which prints each task
// to out, unless webhook names another one.
func (s *devSystem) startSink(ctx context.Context, webhook string, out io.Writer) error {
	if webhook != "" {
		s.webhook = webhook
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sinkLog := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	srv := &http.Server{Handler: SinkHandler(sinkLog, &s.delivered), ReadHeaderTimeout: 10 * time.Second}
	sinkCtx, stopSink := context.WithCancel(context.WithoutCancel(ctx))
	sinkDone := make(chan struct{})
	go func() {
		defer close(sinkDone)
		// The sink is a stand-in receiver for trying dq out: how its
		// server ended does not change how dq dev ends.
		_ = serveUntil(sinkCtx, srv, ln)
	}()
	s.onStop(func() { stopSink(); <-sinkDone })
	s.webhook = "http://" + ln.Addr().String() + "/"
	return nil
}

// devPorts are the HTTP addresses of the daemon (apiAddr), event and work.
func devPorts(apiAddr string) (map[string]string, error) {
	ports := map[string]string{"daemon": apiAddr}
	for _, app := range []string{"event", "work"} {
		p, err := freeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		ports[app] = p
	}
	return ports, nil
}

// appEnv is the environment the three applications share.
func (s *devSystem) appEnv(o devOptions) map[string]string {
	level := "warn"
	if o.verbose {
		level = "info"
	}
	common := map[string]string{
		"DQ_NAMESPACE":      "dq",
		"DQ_REDIS_ADDRS":    s.redisAddr,
		"DQ_SHARDS":         strconv.Itoa(o.shards),
		"DQ_LOG_FORMAT":     "text",
		"DQ_LOG_LEVEL":      level,
		"DQ_JOURNAL_DIR":    filepath.Join(s.dir, "journal"),
		"DQ_ETCD_ENDPOINTS": s.etcdEndpoint,
		"DQ_KAFKA_BROKERS":  s.brokers,
		"DQ_WEBHOOK_URL":    s.webhook,
		// a task to a topic nobody created fires (created on first use)
		"DQ_KAFKA_AUTO_CREATE": "true",
		"DQ_PARTITIONS":        strconv.Itoa(devPartitions),
		"DQ_TOPICS":            strings.Join(s.topics, ","),
	}
	if s.sec != nil {
		for k, v := range s.sec.env() {
			common[k] = v
		}
	}
	return common
}

// runDevApps runs the daemon, event and work applications in g, each on
// its port with the common environment; one that stops before ctx ends
// is an error.
func runDevApps(ctx context.Context, g *errgroup.Group, env Env, common, ports map[string]string) {
	for _, name := range []string{"daemon", "event", "work"} {
		run := apps()[name]
		vars := map[string]string{"DQ_HTTP_ADDR": ports[name]}
		g.Go(func() error {
			getenv := func(k string) string {
				if v, ok := vars[k]; ok {
					return v
				}
				return common[k]
			}
			if err := run(ctx, nil, getenv, env.Stderr); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if ctx.Err() == nil {
				return fmt.Errorf("%s stopped", name)
			}
			return nil
		})
	}
}

// banner says where everything is, and what to try.
func (s *devSystem) banner(say func(string, ...any), api, scheme string, ports map[string]string) {
	say("delayq is running (data in %s)", s.dir)
	say("  API             %s", api)
	say("  console         %s/ui/", api)
	say("  metrics         %s/metrics  %s://%s/metrics  %s://%s/metrics", api, scheme, ports["event"], scheme, ports["work"])
	say("  redis           %s   etcd %s   kafka %s", s.redisAddr, s.etcdEndpoint, s.brokers)
	say("  webhook         %s", s.webhook)
	say("  topics          %s consumed (others are created on first use; --topics a,b adds some)", strings.Join(s.topics, ","))
	if s.sec != nil {
		s.sec.banner(say, api, s.redisAddr, s.etcdEndpoint, s.brokers)
	} else {
		say("try:")
		say(`  curl -s %s/v1/tasks -H 'Content-Type: application/json' -d '{"type":"hello","payload":{"n":1},"delay":"5s"}'`, api)
		say("  dq schedule hello --in 5s --payload '{\"n\":1}'     (DQ_ADDR=%s)", api)
	}
	say("Ctrl-C stops everything.")
}

// devDemo schedules five tasks due over the next five seconds.
func devDemo(ctx context.Context, cl *client.Client, say func(string, ...any)) error {
	tasks := make([]client.Task, 5)
	for i := range tasks {
		tasks[i] = client.Task{
			ID:      fmt.Sprintf("demo-%d-%d", time.Now().Unix(), i+1),
			Type:    "demo.greeting",
			Payload: json.RawMessage(fmt.Sprintf(`{"hello":"world","n":%d}`, i+1)),
			Delay:   time.Duration(i+1) * time.Second,
		}
	}
	res, err := cl.ScheduleBatch(ctx, tasks)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("demo: %w", r.Err)
		}
		say("demo: scheduled %s, due %s", r.ID, r.DueAt.Local().Format("15:04:05.000"))
	}
	return nil
}

// startDevRedis starts redis-server on a free loopback port with AOF
// (appendfsync always) and waits for PING. stop shuts it down. With sec,
// it serves TLS only (client certificates required) and its users come
// from an ACL file in dir: delayq with the namespace's rules, the default
// user off.
func startDevRedis(ctx context.Context, path, dir string, sec *devSecurity) (addr string, stop func(), err error) {
	addr, err = freeLoopbackAddr()
	if err != nil {
		return "", nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	listen := []string{"--port", port}
	ping := func() error { return pingRedis(addr) }
	if sec != nil {
		aclFile := filepath.Join(dir, redisACLFile)
		if err := os.WriteFile(aclFile, []byte(acl.RedisACLFile(devUser, sec.redis, devNamespace, false)), 0o600); err != nil {
			return "", nil, fmt.Errorf("redis acl file: %w", err)
		}
		listen = []string{"--port", "0", "--tls-port", port,
			"--tls-cert-file", sec.certs.Server.Cert, "--tls-key-file", sec.certs.Server.Key,
			"--tls-ca-cert-file", sec.certs.Server.CA, "--tls-auth-clients", "yes",
			"--aclfile", aclFile}
		ping = func() error { return pingRedisTLS(addr, sec.clientTLS(), devUser, sec.redis) }
	}
	cmd := exec.Command(path, append(listen,
		"--bind", "127.0.0.1", "--protected-mode", "no", "--daemonize", "no",
		"--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always",
		"--maxmemory-policy", "noeviction",
		"--hash-max-listpack-value", "512", "--hash-max-listpack-entries", "256")...)
	logs := &tail{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping() == nil {
			return addr, stop, nil
		}
		select {
		case <-done:
			return "", nil, fmt.Errorf("redis-server exited at start:\n%s", logs.String())
		case <-ctx.Done():
			stop()
			return "", nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server did not answer PING within 10s:\n%s", logs.String())
		}
	}
}

func pingRedis(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	return redisPing(conn)
}

// pingRedisTLS logs in to a TLS-only Redis as user and PINGs it.
func pingRedisTLS(addr string, tc *tls.Config, user, password string) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 200 * time.Millisecond}, "tcp", addr, tc)
	if err != nil {
		return err
	}
	return redisPing(conn, "AUTH", user, password)
}

// redisPing sends the command auth (if any) and PING on conn, closes it,
// and fails unless both answered +OK and +PONG.
func redisPing(conn net.Conn, auth ...string) error {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	var req strings.Builder
	if len(auth) > 0 {
		fmt.Fprintf(&req, "*%d\r\n", len(auth))
		for _, a := range auth {
			fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	req.WriteString("*1\r\n$4\r\nPING\r\n")
	if _, err := conn.Write([]byte(req.String())); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	if len(auth) > 0 {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+OK") {
			return errors.New(strings.TrimSpace(line))
		}
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New(strings.TrimSpace(line))
	}
	return nil
}

// waitHealthy waits until every address answers /healthz (scheme http or
// https, through hc).
func waitHealthy(ctx context.Context, scheme string, hc *http.Client, addrs map[string]string) error {
	deadline := time.Now().Add(30 * time.Second)
	for name, addr := range addrs {
		for {
			if err := probeWith(ctx, hc, scheme+"://"+addr+"/healthz"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not become healthy on %s within 30s", name, addr)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s did not start: %w", name, context.Cause(ctx))
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// probeWith GETs url through hc; nil when it answers 2xx.
func probeWith(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// devSecurity is what dq dev --tls adds: a throwaway CA, a server
// certificate for loopback (and the API host), a client certificate for
// user delayq, and random passwords, all written into one directory so
// that another process can use them.
type devSecurity struct {
	dir                            string
	certs                          *devcert.Set
	server, client                 tls.Certificate
	pool                           *x509.CertPool
	redis, etcd, etcdRoot, kafka   string // passwords
	redisFile, etcdFile, kafkaFile string // their files
	etcdRootFile                   string
}

// newDevSecurity writes the certificates (new ones every start: every
// server here is restarted with them) and the passwords (kept when the
// files exist: etcd keeps its users in its data directory) into dir.
func newDevSecurity(dir, apiAddr string) (*devSecurity, error) {
	hosts := []string{"127.0.0.1", "localhost", "::1"}
	if h, _, err := net.SplitHostPort(apiAddr); err == nil && h != "" && !slices.Contains(hosts, h) {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, h)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tls dir: %w", err)
	}
	s := &devSecurity{dir: dir}
	var err error
	if s.certs, err = devcert.WriteSet(dir, devCAName, devUser, hosts...); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	if s.server, err = s.certs.ServerPair.TLSCertificate(); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	if s.client, err = s.certs.ClientPair.TLSCertificate(); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	s.pool = s.certs.CA.Pool()
	for _, p := range []struct {
		name     string
		pw, file *string
	}{{secretRedis, &s.redis, &s.redisFile}, {secretEtcd, &s.etcd, &s.etcdFile}, {secretEtcdRoot, &s.etcdRoot, &s.etcdRootFile}, {secretKafka, &s.kafka, &s.kafkaFile}} {
		*p.file = filepath.Join(dir, p.name)
		if *p.pw, _, err = ensureSecret(*p.file); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
	}
	return s, nil
}

// clientTLS is the configuration of a client of the dev servers: the CA,
// and the client certificate.
func (s *devSecurity) clientTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.pool, Certificates: []tls.Certificate{s.client}}
}

// httpClient trusts the CA; no connection outlives a request.
func (s *devSecurity) httpClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: s.clientTLS(), DisableKeepAlives: true}}
}

// env are the DQ_* settings of the applications besides the addresses,
// secrets through their _FILE variables: what another process needs too.
func (s *devSecurity) env() map[string]string {
	return map[string]string{
		"DQ_REDIS_USERNAME":           devUser,
		"DQ_REDIS_PASSWORD_FILE":      s.redisFile,
		"DQ_REDIS_TLS_CA":             s.certs.Server.CA,
		"DQ_REDIS_TLS_CERT":           s.certs.Client.Cert,
		"DQ_REDIS_TLS_KEY":            s.certs.Client.Key,
		"DQ_ETCD_TLS_CA":              s.certs.Server.CA,
		"DQ_ETCD_TLS_CERT":            s.certs.Client.Cert,
		"DQ_ETCD_TLS_KEY":             s.certs.Client.Key,
		"DQ_ETCD_USERNAME":            devUser,
		"DQ_ETCD_PASSWORD_FILE":       s.etcdFile,
		"DQ_KAFKA_TLS_CA":             s.certs.Server.CA,
		"DQ_KAFKA_SASL_MECHANISM":     config.SASLScramSHA256,
		"DQ_KAFKA_SASL_USERNAME":      devUser,
		"DQ_KAFKA_SASL_PASSWORD_FILE": s.kafkaFile,
		"DQ_HTTP_TLS_CERT":            s.certs.Server.Cert,
		"DQ_HTTP_TLS_KEY":             s.certs.Server.Key,
	}
}

// banner prints the settings a separate process needs and what to try.
func (s *devSecurity) banner(say func(string, ...any), api, redisAddr, etcdEndpoint, brokers string) {
	vars := s.env()
	vars["DQ_NAMESPACE"] = devNamespace
	vars["DQ_REDIS_ADDRS"] = redisAddr
	vars["DQ_ETCD_ENDPOINTS"] = etcdEndpoint
	vars["DQ_KAFKA_BROKERS"] = brokers
	vars["DQ_ADDR"] = api
	vars["DQ_CA"] = s.certs.Server.CA // dq's API commands
	// the HTTP port's certificate is this process' own
	delete(vars, "DQ_HTTP_TLS_CERT")
	delete(vars, "DQ_HTTP_TLS_KEY")
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	slices.Sort(names)
	say("  tls             CA %s; Redis user %s (default user off), etcd user %s (client certificates, auth on), Kafka SASL %s user %s", s.certs.Server.CA, devUser, devUser, config.SASLScramSHA256, devUser)
	say("settings for another process (passwords in %s, mode 0600):", s.dir)
	for _, k := range names {
		say("  export %s=%s", k, vars[k])
	}
	say("try:")
	say("  dq stats --addr %s --ca %s", api, s.certs.Server.CA)
	say(`  curl -s --cacert %s %s/v1/tasks -H 'Content-Type: application/json' -d '{"type":"hello","payload":{"n":1},"delay":"5s"}'`, s.certs.Server.CA, api)
}

// freeLoopbackAddr returns a 127.0.0.1 address whose port was free a
// moment ago.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// dropTime removes the time attribute from the sink's log lines.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// tail keeps the last 8 KiB written.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 8<<10; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
