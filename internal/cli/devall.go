//go:build !dqslim

package cli

import (
	"bufio"
	"context"
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
}

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

	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "dq-dev-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	for _, sub := range []string{"redis", "etcd", "journal"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}

	// Redis: a child process with delayq's recommended settings.
	redisAddr, stopRedis, err := startDevRedis(ctx, redisPath, filepath.Join(dir, "redis"))
	if err != nil {
		return err
	}
	defer stopRedis()

	etcd, err := StartEtcd(ctx, EtcdOptions{Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:0", DataDir: filepath.Join(dir, "etcd"), Name: "dq-dev"})
	if err != nil {
		return err
	}
	defer etcd.Close()
	etcdEndpoint := strings.TrimPrefix(etcd.Config().ListenClientUrls[0].String(), "http://")

	topics := devTopics(o.topics)
	kafka, err := StartKafka(KafkaOptions{Listen: "127.0.0.1:0", Partitions: devPartitions, Topics: append(slices.Clone(topics), "dq.dead")})
	if err != nil {
		return err
	}
	defer kafka.Close()
	brokers := kafka.Advertised

	// The webhook receiver.
	var delivered atomic.Int64
	webhook := o.webhook
	if webhook == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		sinkLog := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: dropTime}))
		srv := &http.Server{Handler: SinkHandler(sinkLog, &delivered), ReadHeaderTimeout: 10 * time.Second}
		sinkCtx, stopSink := context.WithCancel(context.WithoutCancel(ctx))
		sinkDone := make(chan struct{})
		go func() {
			defer close(sinkDone)
			// The sink is a stand-in receiver for trying dq out: how its
			// server ended does not change how dq dev ends.
			_ = serveUntil(sinkCtx, srv, ln)
		}()
		defer func() { stopSink(); <-sinkDone }()
		webhook = "http://" + ln.Addr().String() + "/"
	}

	ports := map[string]string{"daemon": o.apiAddr}
	for _, app := range []string{"event", "work"} {
		p, err := freeLoopbackAddr()
		if err != nil {
			return err
		}
		ports[app] = p
	}
	level := "warn"
	if o.verbose {
		level = "info"
	}
	common := map[string]string{
		"DQ_NAMESPACE":      "dq",
		"DQ_REDIS_ADDRS":    redisAddr,
		"DQ_SHARDS":         strconv.Itoa(o.shards),
		"DQ_LOG_FORMAT":     "text",
		"DQ_LOG_LEVEL":      level,
		"DQ_JOURNAL_DIR":    filepath.Join(dir, "journal"),
		"DQ_ETCD_ENDPOINTS": etcdEndpoint,
		"DQ_KAFKA_BROKERS":  brokers,
		"DQ_WEBHOOK_URL":    webhook,
		// a task to a topic nobody created fires (created on first use)
		"DQ_KAFKA_AUTO_CREATE": "true",
		"DQ_PARTITIONS":        strconv.Itoa(devPartitions),
		"DQ_TOPICS":            strings.Join(topics, ","),
	}
	appsCtx, stopApps := context.WithCancel(ctx)
	defer stopApps()
	g, gctx := errgroup.WithContext(appsCtx)
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
			if err := run(gctx, nil, getenv, env.Stderr); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if gctx.Err() == nil {
				return fmt.Errorf("%s stopped", name)
			}
			return nil
		})
	}
	// Wait for the three applications, then say where everything is.
	upErr := waitHealthy(gctx, ports)
	if upErr != nil {
		stopApps()
		if err := g.Wait(); err != nil {
			return err
		}
		return upErr
	}
	api := "http://" + ports["daemon"]
	say("delayq is running (data in %s)", dir)
	say("  API             %s", api)
	say("  metrics         %s/metrics  http://%s/metrics  http://%s/metrics", api, ports["event"], ports["work"])
	say("  redis           %s   etcd %s   kafka %s", redisAddr, etcdEndpoint, brokers)
	say("  webhook         %s", webhook)
	say("  topics          %s consumed (others are created on first use; --topics a,b adds some)", strings.Join(topics, ","))
	say("try:")
	say(`  curl -s %s/v1/tasks -H 'Content-Type: application/json' -d '{"type":"hello","payload":{"n":1},"delay":"5s"}'`, api)
	say("  dq schedule hello --in 5s --payload '{\"n\":1}'     (DQ_ADDR=%s)", api)
	say("Ctrl-C stops everything.")
	if ready != nil {
		ready(api)
	}
	if o.demo {
		g.Go(func() error { return devDemo(gctx, api, say) })
	}
	err = g.Wait()
	say("delayq stopped")
	return err
}

// devDemo schedules five tasks due over the next five seconds.
func devDemo(ctx context.Context, api string, say func(string, ...any)) error {
	cl := client.New(api)
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
// (appendfsync always) and waits for PING. stop shuts it down.
func startDevRedis(ctx context.Context, path, dir string) (addr string, stop func(), err error) {
	addr, err = freeLoopbackAddr()
	if err != nil {
		return "", nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(path,
		"--port", port, "--bind", "127.0.0.1", "--protected-mode", "no", "--daemonize", "no",
		"--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always",
		"--maxmemory-policy", "noeviction",
		"--hash-max-listpack-value", "512", "--hash-max-listpack-entries", "256")
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
		if pingRedis(addr) == nil {
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
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New(strings.TrimSpace(line))
	}
	return nil
}

// waitHealthy waits until every address answers /healthz.
func waitHealthy(ctx context.Context, addrs map[string]string) error {
	deadline := time.Now().Add(30 * time.Second)
	for name, addr := range addrs {
		for {
			if _, err := probeHTTP(ctx, "http://"+addr+"/healthz"); err == nil {
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
