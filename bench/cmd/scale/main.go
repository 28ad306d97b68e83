// Command scale measures how delayq's throughput and Redis cost move with
// the number of Redis Cluster masters (issue #20):
//
//	go -C bench run ./cmd/scale [-masters 1,2,4] [-short] [-out FILE]
//
// For each master count k it starts a Redis Cluster of k masters
// (redis-server processes, slots split evenly with CLUSTER ADDSLOTSRANGE,
// joined with CLUSTER MEET), an embedded etcd and an in-process kfake
// broker, then the real delayq binaries (built once from this tree) as
// daemon, event and work processes, and a webhook endpoint and a Kafka
// consumer in this process. It prints, each line naming its method: the
// schedule rate, the burst drain rate, the handled rate, redis-server CPU
// per task per master, and the lag of a steady stream. See bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delayq/delayq/bench/internal/host"
	"github.com/delayq/delayq/bench/internal/tbenv"
	"github.com/delayq/delayq/internal/testenv"
)

// config is the run's settings (flags).
type config struct {
	masters            []int
	shards             int // 0: 16 per master
	daemons, events    int
	workers            int
	scaleProcs         bool
	workConc           int
	roleEnv            map[string]map[string]string // -env: extra environment per kind of process
	partitions         int
	schedule, burst    int
	handled            int
	clients, batch     int
	lagRate            float64
	lagDur             time.Duration
	timeout            time.Duration
	idle               time.Duration
	warm               int
	short              bool
	outFile            string
	cpuProfile         string
	redisScripts       bool // -redis-scripts: each phase's Redis time by script (scripts.go)
	remoteProfile      time.Duration
	shardsDesc, sizing string
}

// Results is what -out writes.
type Results struct {
	Command    string    `json:"command"`
	Started    time.Time `json:"started"`
	ElapsedS   float64   `json:"elapsed_s"`
	CPUs       int       `json:"cpus"`
	GoVersion  string    `json:"go_version"`
	LoadStart  string    `json:"load_start"`
	LoadEnd    string    `json:"load_end"`
	Short      bool      `json:"short"`
	Settings   []string  `json:"settings"`
	Runs       []*KRun   `json:"runs"`
	Notes      []string  `json:"notes,omitempty"`
	Disclaimer string    `json:"disclaimer"`
}

// KRun is one master count's figures.
type KRun struct {
	Masters         int       `json:"masters"`
	Shards          int       `json:"shards"`
	ShardsPerMaster []int     `json:"shards_per_master"`
	NamespaceMaster int       `json:"namespace_keys_master"`
	KeysPerMaster   []int64   `json:"keys_per_master_at_end"`
	WebhookCalls    int64     `json:"webhook_calls"`
	RecordsRead     int64     `json:"records_read"`
	Daemons         int       `json:"daemons"`
	Events          int       `json:"events"`
	Workers         int       `json:"workers"`
	LoadBefore      string    `json:"load_before"`
	IdleRedisCPUPct []float64 `json:"idle_redis_cpu_pct_per_master"`
	Schedule        Rate      `json:"schedule"`
	Burst           Rate      `json:"burst"`
	Handled         Rate      `json:"handled"`
	Lag             LagResult `json:"lag"`
	ElapsedS        float64   `json:"elapsed_s"`
}

// Rate is one rate phase.
type Rate struct {
	Method       string  `json:"method"`
	Tasks        int     `json:"tasks"`
	Failed       int     `json:"failed,omitempty"`
	Seen         int     `json:"seen,omitempty"`
	Dups         int     `json:"dups,omitempty"`
	Seconds      float64 `json:"seconds,omitempty"`
	DrainSeconds float64 `json:"drain_s,omitempty"`
	FirstMs      float64 `json:"first_ms,omitempty"`
	Rate         float64 `json:"rate_per_s"`
	RedisCPU     CPU     `json:"redis_cpu"`
	// Cores: schedule, the whole phase; burst and handled, from T to the
	// last task seen
	Cores Cores `json:"cores_busy"`
	// PerTask: burst and handled, from before the scheduling to the last
	// task seen (env.go)
	PerTask PerTask `json:"cpu_per_task"`
}

// CPU is redis-server CPU per task.
type CPU struct {
	Method      string    `json:"method"`
	PerMasterUs []float64 `json:"per_master_us"`
	SumUs       float64   `json:"sum_us"`
}

// LagResult is the steady stream's lag.
type LagResult struct {
	Method   string  `json:"method"`
	Tasks    int     `json:"tasks"`
	Failed   int     `json:"failed,omitempty"`
	Consumer Lags    `json:"consumer"`
	Webhook  Lags    `json:"webhook"`
	RedisCPU CPU     `json:"redis_cpu"`
	PerTask  PerTask `json:"cpu_per_task"`
}

// Lags are quantiles in milliseconds.
type Lags struct {
	Seen int     `json:"seen"`
	Dups int     `json:"dups,omitempty"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

// run is one k's measurement.
type run struct {
	cfg *config
	e   *env
	res *KRun
}

var (
	sayMu sync.Mutex
	notes []string
)

// say prints one line of results to stdout.
func say(f string, args ...any) {
	sayMu.Lock()
	defer sayMu.Unlock()
	fmt.Printf(f+"\n", args...)
}

// note prints a line and keeps it for the JSON's notes.
func (b *run) note(f string, args ...any) {
	s := fmt.Sprintf(f, args...)
	say("NOTE: %s", s)
	sayMu.Lock()
	notes = append(notes, s)
	sayMu.Unlock()
}

const disclaimer = "All processes (redis-server masters, daemons, event and work processes, kfake, etcd, the clients, the consumer and the webhook) share this machine's cores: on a small machine they compete for the same CPUs, so more masters cannot add CPU and the figures show the method, not the scaling. Run the same command on a machine with more cores than processes to see the scaling; the Redis CPU per task per master is the figure that least depends on the machine."

func main() {
	if serveBroker() { // this program re-run as the Kafka broker (broker.go)
		return
	}
	cfg := parseFlags()
	root, err := host.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	tb := tbenv.New("scale", os.Stderr)
	tb.FatalOnSignal("stopping every process")

	start := time.Now()
	res := &Results{
		Command: command(), Started: start, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		LoadStart: host.LoadAverage(), Short: cfg.short, Disclaimer: disclaimer,
	}
	say("# %s", res.Command)
	say("# machine: runtime.NumCPU %d, %s, load average %s", res.CPUs, res.GoVersion, res.LoadStart)
	say("# NOTE: %s", disclaimer)
	if res.CPUs <= 4 {
		say("# NOTE: %d CPUs here: the numbers below show the method; the same command on a bigger machine shows the scaling.", res.CPUs)
	}

	bin := build(tb, root)
	res.Settings = []string{
		"masters " + joinInts(cfg.masters),
		"shards " + cfg.shardsDesc,
		cfg.sizing,
		fmt.Sprintf("processes per k: %d daemon(s), %d event, %d work (scaled by k: %v); work concurrency %s; topics of %d partitions",
			cfg.daemons, cfg.events, cfg.workers, cfg.scaleProcs, concDesc(cfg.workConc), cfg.partitions),
		"redis-server: testenv's settings (no persistence, noeviction, listpack hashes) plus cluster-enabled yes; every delayq setting at its default except DQ_SHARDS, DQ_LOG_LEVEL=warn",
	}
	for _, kind := range slices.Sorted(maps.Keys(cfg.roleEnv)) {
		if base, i := envKind(kind); i != "" {
			res.Settings = append(res.Settings, fmt.Sprintf("environment of %s process %s: %v", base, i, cfg.roleEnv[kind]))
		} else {
			res.Settings = append(res.Settings, fmt.Sprintf("environment of the %s processes: %v", kind, cfg.roleEnv[kind]))
		}
	}
	for _, s := range res.Settings {
		say("# %s", s)
	}

	for _, k := range cfg.masters {
		kr := runK(tb, cfg, bin, k)
		res.Runs = append(res.Runs, kr)
		if cfg.outFile != "" {
			res.LoadEnd, res.ElapsedS = host.LoadAverage(), time.Since(start).Seconds()
			res.Notes = notes
			writeJSON(tb, cfg.outFile, res)
		}
	}
	res.LoadEnd, res.ElapsedS, res.Notes = host.LoadAverage(), time.Since(start).Seconds(), notes
	summary(res)
	if cfg.outFile != "" {
		writeJSON(tb, cfg.outFile, res)
		say("# wrote %s", cfg.outFile)
	}
	tb.Close()
	say("# elapsed %v, load average at the end %s", time.Since(start).Round(time.Second), res.LoadEnd)
	if tb.Failed() {
		os.Exit(1)
	}
}

// startCPUProfile starts a CPU profile of this process into
// prefix-k<k>-<phase>.prof (prefix "": none) and returns what stops it.
// One profile per phase window: the in-process broker's share of a window
// (kfake.(*Cluster).run handles every request on one goroutine) is what
// tells whether it, not delayq, bounds a rate.
func (b *run) startCPUProfile(phase string) func() {
	if b.cfg.cpuProfile == "" {
		return func() {}
	}
	remote := b.remoteProfiles(phase)
	path := fmt.Sprintf("%s-k%d-%s.prof", b.cfg.cpuProfile, b.e.k, phase)
	f, err := os.Create(path)
	if err != nil {
		b.e.scope.Fatalf("-cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.e.scope.Fatalf("-cpuprofile: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.e.scope.Errorf("-cpuprofile: %v", err)
		}
		remote()
	}
}

// remoteProfiles starts reading a CPU profile and an allocation profile
// (what was allocated over the window: Go's delta profile) of every
// process serving its profiles (process 0 of each kind, DQ_PPROF_ADDR)
// over the next cfg.remoteProfile, into
// prefix-k<k>-<phase>-<kind><i>.prof and .allocs.prof, and returns what
// waits for them.
func (b *run) remoteProfiles(phase string) (wait func()) {
	var wg sync.WaitGroup
	secs := max(int(b.cfg.remoteProfile.Seconds()), 1)
	for _, p := range b.e.all() {
		if p.pprof == "" {
			continue
		}
		base := fmt.Sprintf("%s-k%d-%s-%s", b.cfg.cpuProfile, b.e.k, phase, strings.ReplaceAll(p.name, " ", ""))
		for _, kind := range []struct{ path, suffix string }{{"profile", ".prof"}, {"allocs", ".allocs.prof"}} {
			wg.Go(func() {
				hc := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
				resp, err := hc.Get(fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", p.pprof, kind.path, secs))
				if err != nil {
					b.note("k=%d %s: %s profile of %s: %v", b.e.k, phase, kind.path, p.name, err)
					return
				}
				defer resp.Body.Close()
				data, err := io.ReadAll(resp.Body)
				if err == nil && resp.StatusCode == http.StatusOK {
					err = os.WriteFile(base+kind.suffix, data, 0o644)
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					b.note("k=%d %s: %s profile of %s: status %d, %v", b.e.k, phase, kind.path, p.name, resp.StatusCode, err)
				}
			})
		}
	}
	return wg.Wait
}

// runK measures one master count in a scope of its own: all of it stops
// before the next k starts.
func runK(tb *tbenv.TB, cfg *config, bin string, k int) *KRun {
	t0 := time.Now()
	pc := procCounts{cfg.daemons, cfg.events, cfg.workers}
	if cfg.scaleProcs {
		pc = procCounts{cfg.daemons * k, cfg.events * k, cfg.workers * k}
	}
	shards := cfg.shards
	if shards == 0 {
		shards = 16 * k
	}
	kr := &KRun{Masters: k, Shards: shards, Daemons: pc.daemons, Events: pc.events, Workers: pc.workers, LoadBefore: host.LoadAverage()}
	say("")
	say("## k=%d masters: %d shards, %d daemon(s), %d event, %d work process(es); load average %s", k, shards, pc.daemons, pc.events, pc.workers, kr.LoadBefore)
	scope := tb.Sub("k=" + strconv.Itoa(k))
	defer scope.Close()
	e := startEnv(scope, bin, k, shards, cfg.partitions, pc, cfg.workConc, cfg.roleEnv, cfg.cpuProfile != "")
	kr.ShardsPerMaster = e.shardsPerMaster
	kr.NamespaceMaster = e.nsMaster
	say("k=%d shards per master (CLUSTER KEYSLOT of {%s:<shard>} against each master's slot range): %s; the namespace-wide keys {%s} (meta, wake channel) on m%d",
		k, namespace, joinInts(e.shardsPerMaster), namespace, e.nsMaster)
	for i, n := range e.shardsPerMaster {
		if n == 0 {
			(&run{e: e}).note("k=%d: master %d owns no shard: raise -shards", k, i)
		}
	}
	b := &run{cfg: cfg, e: e, res: kr}
	b.warmUp(cfg.warm, cfg.idle)
	for _, phase := range []func(){b.phaseSchedule, b.phaseBurst, b.phaseHandled, b.phaseLag} {
		phase()
		e.checkAlive()
	}
	kr.KeysPerMaster = e.keysPerMaster()
	kr.WebhookCalls, kr.RecordsRead = e.hook.calls.Load(), e.consumer.calls.Load()
	kr.ElapsedS = time.Since(t0).Seconds()
	say("k=%d keys per master at the end (DBSIZE): %s; webhook calls %d, records read by the consumer %d (warm-up included); k done in %v",
		k, joinInt64s(kr.KeysPerMaster), kr.WebhookCalls, kr.RecordsRead, time.Since(t0).Round(100*time.Millisecond))
	return kr
}

// summary prints one table of every k.
func summary(r *Results) {
	say("")
	say("## summary (%d CPUs, load average %s -> %s)", r.CPUs, r.LoadStart, r.LoadEnd)
	say("%-7s %-7s %-14s %-14s %-14s %-22s %-22s %-22s %-24s %s", "masters", "shards", "schedule/s", "burst/s", "handled/s", "lag consumer p50/p99", "lag webhook p50/p99", "redis µs/task/master", "pipeline µs/task", "(handled: schedule..finish, max master / sum; pipeline: daemons+events+work+redis, handled / steady)")
	for _, k := range r.Runs {
		maxUs := 0.0
		for _, v := range k.Handled.RedisCPU.PerMasterUs {
			maxUs = max(maxUs, v)
		}
		say("%-7d %-7d %-14.0f %-14.0f %-14.0f %-22s %-22s %-22s %-24s",
			k.Masters, k.Shards, k.Schedule.Rate, k.Burst.Rate, k.Handled.Rate,
			fmt.Sprintf("%.1f / %.1f ms", k.Lag.Consumer.P50, k.Lag.Consumer.P99),
			fmt.Sprintf("%.1f / %.1f ms", k.Lag.Webhook.P50, k.Lag.Webhook.P99),
			fmt.Sprintf("%.1f / %.1f", maxUs, k.Handled.RedisCPU.SumUs),
			fmt.Sprintf("%.1f / %.1f", k.Handled.PerTask.Pipeline, k.Lag.PerTask.Pipeline))
	}
	if len(r.Notes) > 0 {
		say("notes:")
		for _, n := range r.Notes {
			say("  - %s", n)
		}
	}
}

// envKind splits -env's KIND into the kind of process and the index of
// one of them ("" for every process of the kind): work1 -> work, 1.
func envKind(kind string) (base, index string) {
	base = strings.TrimRight(kind, "0123456789")
	return base, kind[len(base):]
}

func parseFlags() *config {
	cfg := &config{}
	masters := flag.String("masters", "1,2,4", "comma-separated master counts to measure")
	flag.IntVar(&cfg.shards, "shards", 0, "DQ_SHARDS (0: 16 per master, so every master owns several shards)")
	flag.IntVar(&cfg.daemons, "daemons", 1, "daemon processes")
	flag.IntVar(&cfg.events, "events", 1, "event processes")
	flag.IntVar(&cfg.workers, "workers", 2, "work processes")
	flag.BoolVar(&cfg.scaleProcs, "scale-procs", false, "multiply -daemons, -events and -workers by the master count")
	flag.IntVar(&cfg.workConc, "work-concurrency", 0, "DQ_WORK_CONCURRENCY of the work processes (0: the binary's default)")
	cfg.roleEnv = map[string]map[string]string{}
	flag.Func("env", "KIND:NAME=VALUE: an environment variable of every process of KIND (daemon, event, work), e.g. work:GOMAXPROCS=1, or of one of them (KIND and its index: work1:GOMAXPROCS=1); repeatable", func(v string) error {
		kind, kv, ok := strings.Cut(v, ":")
		name, val, ok2 := strings.Cut(kv, "=")
		base, _ := envKind(kind)
		if !ok || !ok2 || name == "" || (base != "daemon" && base != "event" && base != "work") {
			return fmt.Errorf("want KIND:NAME=VALUE with KIND daemon, event or work, or one of them with a process' index (work1), got %q", v)
		}
		if cfg.roleEnv[kind] == nil {
			cfg.roleEnv[kind] = map[string]string{}
		}
		cfg.roleEnv[kind][name] = val
		return nil
	})
	flag.IntVar(&cfg.partitions, "partitions", 16, "partitions of every topic")
	flag.IntVar(&cfg.schedule, "schedule", 0, "tasks of the schedule phase (0: 100000, -short 4000)")
	flag.IntVar(&cfg.burst, "burst", 0, "tasks of the burst phase (0: 50000, -short 2000)")
	flag.IntVar(&cfg.handled, "handled", 0, "tasks of the handled phase (0: 20000, -short 1000)")
	flag.IntVar(&cfg.clients, "clients", 4, "client goroutines scheduling")
	flag.IntVar(&cfg.batch, "batch", 500, "tasks per POST /v1/tasks/batch (the daemon takes up to DQ_MAX_BATCH, 1000)")
	flag.Float64Var(&cfg.lagRate, "lag-rate", 0, "tasks due per second in the lag phase (0: 500, -short 200)")
	flag.DurationVar(&cfg.lagDur, "lag-duration", 0, "length of the lag phase's stream (0: 15s, -short 3s)")
	flag.DurationVar(&cfg.timeout, "timeout", 60*time.Second, "how long a phase waits after its last due time")
	flag.BoolVar(&cfg.short, "short", false, "small sizes: the whole run in under 2 minutes")
	flag.StringVar(&cfg.outFile, "out", "", "write the results as JSON to this file")
	flag.DurationVar(&cfg.remoteProfile, "remote-profile", 3*time.Second, "with -cpuprofile, how long the CPU profile of process 0 of each kind (served on DQ_PPROF_ADDR) lasts from each window's start")
	flag.BoolVar(&cfg.redisScripts, "redis-scripts", false, "print each phase's Redis time per task by script, from every master's SLOWLOG with every command logged (the logging costs the servers about a tenth more CPU per task)")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write CPU profiles of this process (etcd, the webhook, the consumer, the clients; the broker is a child process) over the windows of the schedule, burst and handled phases to PREFIX-k<masters>-<phase>.prof")
	flag.Parse()
	for f := range strings.SplitSeq(*masters, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 64 {
			fmt.Fprintf(os.Stderr, "scale: -masters: %q is not a count 1..64\n", f)
			os.Exit(2)
		}
		cfg.masters = append(cfg.masters, n)
	}
	if cfg.daemons < 1 || cfg.events < 1 || cfg.workers < 1 || cfg.clients < 1 || cfg.batch < 1 || cfg.batch > 1000 || cfg.partitions < 1 || cfg.shards < 0 {
		fmt.Fprintln(os.Stderr, "scale: -daemons, -events, -workers, -clients, -partitions must be positive, -batch 1..1000, -shards not negative")
		os.Exit(2)
	}
	def := func(v *int, full, short int) {
		if *v == 0 {
			*v = full
			if cfg.short {
				*v = short
			}
		}
	}
	def(&cfg.schedule, 100000, 4000)
	def(&cfg.burst, 50000, 2000)
	def(&cfg.handled, 20000, 1000)
	if cfg.lagRate == 0 {
		cfg.lagRate = 500
		if cfg.short {
			cfg.lagRate = 200
		}
	}
	if cfg.lagDur == 0 {
		cfg.lagDur = 15 * time.Second
		if cfg.short {
			cfg.lagDur = 3 * time.Second
		}
	}
	cfg.warm, cfg.idle = 200, 2*time.Second
	if cfg.short {
		cfg.warm, cfg.idle = 50, time.Second
	}
	cfg.shardsDesc = strconv.Itoa(cfg.shards)
	if cfg.shards == 0 {
		cfg.shardsDesc = "16 per master"
	}
	cfg.sizing = fmt.Sprintf("sizes: schedule %d, burst %d, handled %d, lag %.0f/s for %v; %d client goroutines, batches of %d; warm-up %d tasks per path; phase timeout %v",
		cfg.schedule, cfg.burst, cfg.handled, cfg.lagRate, cfg.lagDur, cfg.clients, cfg.batch, cfg.warm, cfg.timeout)
	return cfg
}

// build compiles cmd/dq once (static, -trimpath, as the images) into a
// temporary directory; it runs as daemon, event or work by its argv[0].
func build(tb *tbenv.TB, root string) string {
	dir := tb.TempDir()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Minute)
	defer cancel()
	if err := testenv.GoBuild(ctx, root, dir, "", "./cmd/dq"); err != nil {
		tb.Fatalf("build: %v", err)
	}
	say("# built %s/cmd/dq in %v (runs as daemon, event, work by its argv[0])", root, time.Since(t0).Round(100*time.Millisecond))
	return filepath.Join(dir, "dq")
}

func writeJSON(tb *tbenv.TB, path string, r *Results) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		tb.Fatalf("encode results: %v", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		tb.Fatalf("write %s: %v", path, err)
	}
}

func concDesc(n int) string {
	if n == 0 {
		return "default (16)"
	}
	return strconv.Itoa(n)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func joinInt64s(v []int64) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(s, ",")
}

// command is the command line, as run from the repository root.
func command() string {
	return strings.Join(append([]string{"go", "-C", "bench", "run", "./cmd/scale"}, os.Args[1:]...), " ")
}
