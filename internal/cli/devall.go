//go:build !dqslim

package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
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
	"github.com/delayq/delayq/internal/tracing"
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
	trace   bool   // print every span (package tracing)
	// settings are the DQ_* variables of dq dev's environment it passes
	// on to the applications (devPassedEnv); ignored names those it
	// found set but sets itself (devOwnedEnv).
	settings map[string]string
	fromEnv  []string // the names of the DQ_* variables applied
	ignored  []string
	token    string // the API token of settings (DQ_API_TOKEN or its file): the demo's and the banner's
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
	o, err := parseDevArgs(env, args)
	if err != nil {
		return err
	}
	return devAll(ctx, env, o, nil)
}

// parseDevArgs reads dq dev's flags, then the DQ_* settings of env that
// apply (flags win over them).
func parseDevArgs(env Env, args []string) (devOptions, error) {
	fs := newFlagSet("dev", env)
	var o devOptions
	fs.StringVar(&o.dir, "dir", "", "keep Redis, etcd and the journal here across runs (default: a temporary directory, removed at exit)")
	fs.StringVar(&o.apiAddr, "api-addr", "127.0.0.1:7070", "address of the daemon's API")
	fs.IntVar(&o.shards, "shards", 16, "number of shards (env DQ_SHARDS)")
	fs.StringVar(&o.webhook, "webhook", "", "deliver tasks to this URL (env DQ_WEBHOOK_URL; default: a built-in receiver that prints each task)")
	fs.BoolVar(&o.demo, "demo", false, "schedule a few tasks and show them firing")
	fs.BoolVar(&o.verbose, "verbose", false, "show the applications' info logs (default: warnings and errors, or DQ_LOG_LEVEL)")
	fs.StringVar(&o.redis, "redis-server", "redis-server", "the redis-server binary")
	fs.StringVar(&o.topics, "topics", "", "more Kafka topics to create at start and consume besides dq.tasks (comma-separated, e.g. a,b); any other topic is created on first use")
	fs.BoolVar(&o.tls, "tls", false, "secured connections: a throwaway CA in DIR/tls, Redis on TLS only with ACL user delayq (default user off), etcd on TLS with client certificates and authentication, Kafka on TLS with SASL SCRAM-SHA-256, the API on HTTPS; prints the settings another process needs")
	fs.BoolVar(&o.trace, "trace", false, "print the spans of every task's trace (OpenTelemetry: request, fire, attempt, webhook), one line each; without it the OTEL_* variables decide (e.g. OTEL_EXPORTER_OTLP_ENDPOINT)")
	fs.Usage = func() { devUsage(fs) }
	if err := parseNoArgs(fs, args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return o, o.applyEnv(env, set)
}

// devPassedEnv are the DQ_* settings dq dev takes from its environment
// and passes on to the applications, by the application that reads them
// (dq dev -h lists them).
var devPassedEnv = []struct{ app, names string }{
	{"all", "DQ_SHARDS DQ_RETENTION DQ_SHUTDOWN_TIMEOUT DQ_LOG_LEVEL DQ_LOG_FORMAT DQ_OUTCOMES_TOPIC"},
	{"daemon", "DQ_API_TOKEN DQ_API_TOKEN_FILE DQ_MAX_BODY DQ_MAX_BATCH DQ_MAX_RECORD_BYTES DQ_REDIS_TIMEOUT DQ_ALLOWED_TOPICS DQ_ALLOWED_ORIGINS DQ_MAX_SCHEDULES"},
	{"event", "DQ_FIRE_BATCH DQ_LEASE DQ_FIRE_AHEAD DQ_IDLE_POLL DQ_SESSION_TTL DQ_FIRE_POISON_GRACE DQ_SCHEDULER_LOOKAHEAD DQ_SCHEDULER_INTERVAL DQ_OUTCOMES_DELIVERED"},
	{"work", "DQ_WEBHOOK_URL DQ_WORK_CONFIG DQ_WEBHOOK_SECRET DQ_WEBHOOK_SECRET_FILE DQ_WEBHOOK_TLS_CA DQ_WEBHOOK_TLS_CERT DQ_WEBHOOK_TLS_KEY DQ_WORK_CONCURRENCY DQ_WORK_MAX_HELD DQ_WORK_MAX_HELD_BYTES DQ_DEFAULT_TIMEOUT DQ_BACKOFF_MIN DQ_BACKOFF_MAX DQ_BACKOFF_JITTER DQ_MAX_PAYLOAD DQ_CLAIM_MARGIN DQ_OUTCOMES_ATTEMPTS DQ_METRICS_MAX_TYPES DQ_UNHANDLED_TYPES"},
}

// devOwnedEnv are the DQ_* settings dq dev sets itself (its flags and the
// infrastructure it starts decide them): set in its environment, they are
// ignored, and it says so.
const devOwnedEnv = "DQ_NAMESPACE DQ_REDIS_ADDRS DQ_REDIS_USERNAME DQ_REDIS_PASSWORD DQ_REDIS_PASSWORD_FILE " +
	"DQ_ETCD_ENDPOINTS DQ_KAFKA_BROKERS DQ_KAFKA_AUTO_CREATE DQ_TOPICS DQ_PARTITIONS DQ_DEAD_TOPIC " +
	"DQ_JOURNAL_DIR DQ_HTTP_ADDR DQ_HTTP_TLS_CERT DQ_HTTP_TLS_KEY"

// applyEnv takes the settings of devPassedEnv from env into o.settings
// (DQ_SHARDS, DQ_WEBHOOK_URL and DQ_LOG_LEVEL unless the flag standing for
// it was given: --shards, --webhook, --verbose), the API token, and notes
// which of devOwnedEnv env sets.
func (o *devOptions) applyEnv(env Env, set map[string]bool) error {
	getenv := env.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	o.settings = map[string]string{}
	for _, g := range devPassedEnv {
		for _, k := range strings.Fields(g.names) {
			if v := getenv(k); v != "" {
				o.settings[k] = v
			}
		}
	}
	for k, flagName := range map[string]string{"DQ_SHARDS": "shards", "DQ_WEBHOOK_URL": "webhook", "DQ_LOG_LEVEL": "verbose"} {
		if set[flagName] {
			delete(o.settings, k)
		}
	}
	o.fromEnv = slices.Sorted(maps.Keys(o.settings))
	if v, ok := o.settings["DQ_SHARDS"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("dev: DQ_SHARDS %q: a whole number", v)
		}
		o.shards = n
	}
	if v, ok := o.settings["DQ_WEBHOOK_URL"]; ok {
		o.webhook = v
	}
	// o.shards and o.webhook carry these two
	delete(o.settings, "DQ_SHARDS")
	delete(o.settings, "DQ_WEBHOOK_URL")
	o.token = o.settings["DQ_API_TOKEN"]
	if f := o.settings["DQ_API_TOKEN_FILE"]; f != "" && o.token == "" {
		tok, err := config.ReadSecretFile(f)
		if err != nil {
			return fmt.Errorf("dev: DQ_API_TOKEN_FILE: %w", err)
		}
		o.token = tok
	}
	for _, k := range strings.Fields(devOwnedEnv) {
		if getenv(k) != "" {
			o.ignored = append(o.ignored, k)
		}
	}
	return nil
}

// devUsage is dq dev -h: the flags, what the built-in receiver answers
// and which DQ_* settings apply.
func devUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `Usage: dq dev [flags]
       dq dev etcd | kafka | sink | certs [flags]   (one piece of it; dq dev NAME -h)

Runs delayq in one process: redis-server (a child), an embedded etcd and
Kafka broker, the daemon, event and work applications, and (without
--webhook) a built-in webhook receiver that prints every task delivered.
`+sinkRules+`
Flags:
`)
	fs.PrintDefaults()
	fmt.Fprint(w, "\nThese DQ_* variables apply to the applications (dq app NAME -h says what each\ndoes); --shards, --webhook and --verbose win over DQ_SHARDS, DQ_WEBHOOK_URL\nand DQ_LOG_LEVEL:\n")
	for _, g := range devPassedEnv {
		fmt.Fprint(w, wrapWords(fmt.Sprintf("  %-7s ", g.app), strings.Fields(g.names), 80))
	}
	fmt.Fprint(w, "dq dev sets these itself, and says so at start when they are set:\n")
	fmt.Fprint(w, wrapWords("  ", strings.Fields(devOwnedEnv), 80))
}

// wrapWords writes words after prefix, wrapped before width columns,
// continuation lines indented as deep as prefix.
func wrapWords(prefix string, words []string, width int) string {
	var b strings.Builder
	indent := strings.Repeat(" ", len(prefix))
	line := prefix
	for i, w := range words {
		if i > 0 && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent + w
			continue
		}
		if i > 0 {
			line += " "
		}
		line += w
	}
	b.WriteString(line + "\n")
	return b.String()
}

// devAll runs the system until ctx ends. ready, when not nil, receives the
// API URL once everything is up (tests).
func devAll(ctx context.Context, env Env, o devOptions, ready func(apiURL string)) (err error) {
	redisPath, lookErr := exec.LookPath(o.redis)
	if lookErr != nil {
		return errors.New(redisInstallHint) //nolint:staticcheck // ST1005: a multi-line install hint printed as is, never wrapped
	}
	// A taken API address is said before anything starts (once started,
	// the other applications would log their cancellation first). The
	// applications' addresses stay reserved (listened on) until just
	// before the applications bind them: Redis, etcd, Kafka and the sink
	// listen on ports the kernel picks, and one of them took a free API
	// address given as --api-addr (seen: the daemon's "address already in
	// use" at the embedded broker's port).
	apiLn, err := reserveAPIAddr(o.apiAddr)
	if err != nil {
		return err
	}
	reserved := []net.Listener{apiLn}
	defer func() { closeAll(reserved) }() // those still reserved on an early return
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
	ports, more, err := devPorts(o.apiAddr)
	reserved = append(reserved, more...)
	if err != nil {
		return err
	}
	scheme, hc := "http", http.DefaultClient
	if s.sec != nil {
		scheme, hc = "https", s.sec.httpClient()
	}
	appsCtx, stopApps := context.WithCancel(ctx)
	defer stopApps()
	endTracing, err := devTracing(ctx, o, out)
	if err != nil {
		return err
	}
	defer endTracing()
	g, gctx := errgroup.WithContext(appsCtx)
	closeAll(reserved)
	reserved = nil
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
	s.banner(say, api, scheme, ports, o)
	if ready != nil {
		ready(api)
	}
	if o.demo {
		opts := []client.Option{client.WithToken(o.token)}
		if s.sec != nil {
			opts = append(opts, client.WithHTTPClient(hc))
		}
		cl := client.New(api, opts...)
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
	sinkOwn      bool   // webhook is the built-in receiver
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
	s.sinkOwn = true
	return nil
}

// reserveAPIAddr listens on the API address, so that nothing else in
// this process takes it meanwhile (the caller closes it: closeAll); it
// fails when the address cannot be listened on (taken, or not an address
// of this machine), naming --api-addr.
func reserveAPIAddr(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dev: --api-addr %s: %w", addr, err)
	}
	return ln, nil
}

// closeAll closes reserved addresses.
func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		_ = ln.Close()
	}
}

// devPorts are the HTTP addresses of the daemon (apiAddr), event and
// work; the event's and work's are free ports kept listened on until the
// caller closes them (the listeners returned).
func devPorts(apiAddr string) (map[string]string, []net.Listener, error) {
	ports := map[string]string{"daemon": apiAddr}
	var lns []net.Listener
	for _, app := range []string{"event", "work"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, lns, err
		}
		lns = append(lns, ln)
		ports[app] = ln.Addr().String()
	}
	return ports, lns, nil
}

// appEnv is the environment the three applications share.
func (s *devSystem) appEnv(o devOptions) map[string]string {
	// the settings of dq dev's environment first (applyEnv dropped
	// DQ_LOG_LEVEL for --verbose): what dq dev sets itself (below) wins
	common := maps.Clone(o.settings)
	if common == nil {
		common = map[string]string{}
	}
	if _, ok := common["DQ_LOG_LEVEL"]; !ok {
		common["DQ_LOG_LEVEL"] = "warn"
		if o.verbose {
			common["DQ_LOG_LEVEL"] = "info"
		}
	}
	if _, ok := common["DQ_LOG_FORMAT"]; !ok {
		common["DQ_LOG_FORMAT"] = "text"
	}
	for k, v := range map[string]string{
		"DQ_NAMESPACE":      "dq",
		"DQ_REDIS_ADDRS":    s.redisAddr,
		"DQ_SHARDS":         strconv.Itoa(o.shards),
		"DQ_JOURNAL_DIR":    filepath.Join(s.dir, "journal"),
		"DQ_ETCD_ENDPOINTS": s.etcdEndpoint,
		"DQ_KAFKA_BROKERS":  s.brokers,
		"DQ_WEBHOOK_URL":    s.webhook,
		// a task to a topic nobody created fires (created on first use)
		"DQ_KAFKA_AUTO_CREATE": "true",
		"DQ_PARTITIONS":        strconv.Itoa(devPartitions),
		"DQ_TOPICS":            strings.Join(s.topics, ","),
	} {
		common[k] = v
	}
	if s.sec != nil {
		for k, v := range s.sec.env() {
			common[k] = v
		}
	}
	return common
}

// devTracing sets up the tracing of the three applications, which share
// this process' tracer provider (service delayq-dev): with --trace every
// span is printed to out, a line each (tracing.Printer), half a second
// after it ends at most; otherwise the OTEL_* variables decide, as for
// the binaries. The function returned flushes and stops it.
func devTracing(ctx context.Context, o devOptions, out io.Writer) (func(), error) {
	to := tracing.Options{Service: "delayq-dev", Version: config.Version("dq")}
	if o.trace {
		to.Exporter, to.BatchTimeout = tracing.NewPrinter(out), 500*time.Millisecond
	}
	end, err := tracing.Setup(ctx, to, slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return nil, err
	}
	return func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = end(fctx)
	}, nil
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
func (s *devSystem) banner(say func(string, ...any), api, scheme string, ports map[string]string, o devOptions) {
	say("delayq is running (data in %s)", s.dir)
	say("  API             %s", api)
	say("  console         %s/ui/", api)
	say("  metrics         %s/metrics  %s://%s/metrics  %s://%s/metrics", api, scheme, ports["event"], scheme, ports["work"])
	say("  redis           %s   etcd %s   kafka %s", s.redisAddr, s.etcdEndpoint, s.brokers)
	say("  webhook         %s", s.webhook)
	if s.sinkOwn {
		say("  receiver        prints each task; fails %s* tasks for good (400), %s* tasks on attempts 1-%d (500)", SinkFailPrefix, SinkFlakyPrefix, SinkFlakyFailures)
	}
	say("  topics          %s consumed (others are created on first use; --topics a,b adds some)", strings.Join(s.topics, ","))
	if len(o.fromEnv) > 0 {
		say("  from the env    %s", strings.Join(o.fromEnv, " "))
	}
	if len(o.ignored) > 0 {
		say("  ignored         %s (dq dev sets these itself)", strings.Join(o.ignored, " "))
	}
	auth := ""
	if o.token != "" {
		say("  API token       required on /v1/* (DQ_API_TOKEN); the console asks for it")
		auth = ` -H "Authorization: Bearer $DQ_API_TOKEN"`
	}
	if s.sec != nil {
		s.sec.banner(say, api, s.redisAddr, s.etcdEndpoint, s.brokers, auth)
	} else {
		say("try:")
		say(`  curl -s %s/v1/tasks%s -H 'Content-Type: application/json' -d '{"type":"hello","payload":{"n":1},"delay":"5s"}'`, api, auth)
		say("  dq schedule hello --in 5s --payload '{\"n\":1}'     (DQ_ADDR=%s)", api)
		say("  dq schedule flaky.hello --in 1s                   (fails twice on purpose, succeeds on attempt 3)")
		say("  dq schedule fail.hello --id f1 --in 1s; dq get f1 (fails for good: dead; dq dead redrive f1)")
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
func (s *devSecurity) banner(say func(string, ...any), api, redisAddr, etcdEndpoint, brokers, auth string) {
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
	say(`  curl -s --cacert %s %s/v1/tasks%s -H 'Content-Type: application/json' -d '{"type":"hello","payload":{"n":1},"delay":"5s"}'`, s.certs.Server.CA, api, auth)
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
