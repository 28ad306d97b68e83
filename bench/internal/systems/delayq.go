package systems

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/bench/internal/tbenv"
	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/embedded"
	"github.com/delayq/delayq/internal/daemon"
	"github.com/delayq/delayq/internal/event"
	"github.com/delayq/delayq/internal/record"
	"github.com/delayq/delayq/internal/testenv"
)

// DelayQOptions says what StartDelayQ runs besides the daemon.
type DelayQOptions struct {
	// Events is the number of event processes (0: none, nothing fires).
	Events int
	// Shards is the namespace's shard count (0: 16, the default).
	Shards int
	// Record, when set, gets every record of the namespace's topic from a
	// franz-go consumer started before the event processes.
	Record *Recorder
}

// DelayQ is one delayq deployment in a fresh namespace.
type DelayQ struct {
	NS     string
	Topic  string
	Shards int
	Base   string         // daemon URL, http://127.0.0.1:port
	HTTP   *http.Client   // keep-alive client for raw API calls
	Client *client.Client // the Go client on HTTP
	Events []*event.App
}

var nsSeq atomic.Int64

// quietLogger logs errors only, to stderr.
func quietLogger(component string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})).With("component", component)
}

// StartDelayQ starts a daemon, the requested event processes and the
// consumer, waits until every shard has a polling leader and returns. All
// of it stops when scope closes.
func StartDelayQ(scope *tbenv.TB, in *Infra, o DelayQOptions) *DelayQ {
	shards := o.Shards
	if shards == 0 {
		shards = 16
	}
	ns := "bench" + strconv.FormatInt(nsSeq.Add(1), 10)
	d := &DelayQ{NS: ns, Topic: "dq." + ns, Shards: shards}

	dc := daemon.DefaultConfig()
	dc.Namespace = ns
	dc.Shards = shards
	dc.RedisAddrs = []string{in.Redis.Addr}
	dc.HTTPAddr = "127.0.0.1:0"
	dc.JournalDir = scope.TempDir()
	dc.EtcdEndpoints = nil // rate limits are not benchmarked here
	dc.MaxBody = 4 << 20
	dc.ShutdownGrace = 5 * time.Second
	da, err := daemon.New(scope.Context(), dc, quietLogger("daemon"))
	if err != nil {
		scope.Fatalf("start daemon: %v", err)
	}
	runApp(scope, "daemon", da.Run)
	d.Base = "http://" + da.Addr()
	tr := &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}
	d.HTTP = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	scope.Cleanup(tr.CloseIdleConnections)
	d.Client = client.New(d.Base, client.WithHTTPClient(d.HTTP))

	if o.Events == 0 {
		return d
	}
	in.Kafka.CreateTopic(scope, d.Topic, TopicPartitions)
	if o.Record != nil {
		d.consume(scope, in, o.Record)
	}
	for i := range o.Events {
		ec := event.DefaultConfig()
		ec.Namespace = ns
		ec.Shards = shards
		ec.RedisAddrs = []string{in.Redis.Addr}
		ec.EtcdEndpoints = in.Etcd.Endpoints
		ec.KafkaBrokers = in.Kafka.Brokers
		ec.HTTPAddr = "127.0.0.1:0"
		ec.ProcessID = fmt.Sprintf("%s-event%d", ns, i)
		ec.DefaultTopic = d.Topic
		ec.DeadTopic = DeadTopic
		ec.ShutdownGrace = 10 * time.Second
		ea, err := event.New(scope.Context(), ec, quietLogger(ec.ProcessID))
		if err != nil {
			scope.Fatalf("start event process: %v", err)
		}
		runApp(scope, ec.ProcessID, ea.Run)
		d.Events = append(d.Events, ea)
	}
	d.waitLeaders(scope, shards, 30*time.Second)
	return d
}

// StartEmbedded opens a producer that runs the daemon in this process
// (package embedded) on a fresh namespace of in's Redis with shards
// shards (0: 16), configured as StartDelayQ configures its daemon. It
// closes when scope closes.
func StartEmbedded(scope *tbenv.TB, in *Infra, shards int) *embedded.Producer {
	if shards == 0 {
		shards = 16
	}
	ns := "bench" + strconv.FormatInt(nsSeq.Add(1), 10)
	p, err := embedded.Open(scope.Context(), embedded.Options{
		Args: []string{"-namespace=" + ns, "-shards=" + strconv.Itoa(shards), "-redis-addrs=" + in.Redis.Addr,
			"-journal-dir=" + scope.TempDir(), "-etcd-endpoints=", "-max-body=" + strconv.Itoa(4<<20)},
		Getenv: func(string) string { return "" },
		Logger: quietLogger("embedded"),
	})
	if err != nil {
		scope.Fatalf("open embedded producer: %v", err)
	}
	scope.Cleanup(func() { _ = p.Close() })
	return p
}

// waitLeaders waits until the event processes together poll every shard,
// within one shard of each other.
func (d *DelayQ) waitLeaders(scope *tbenv.TB, shards int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		total, lo, hi := 0, shards, 0
		for _, e := range d.Events {
			n := len(e.Leading())
			total += n
			lo, hi = min(lo, n), max(hi, n)
		}
		if total == shards && hi-lo <= 1 {
			return
		}
		if time.Now().After(deadline) {
			scope.Fatalf("delayq: %d of %d shards led (spread %d..%d) after %v", total, shards, lo, hi, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// consume records every record of the namespace's topic: At = when
// PollFetches returned it, Stamp = the record timestamp.
func (d *DelayQ) consume(scope *tbenv.TB, in *Infra, rec *Recorder) {
	in.Kafka.Consume(scope, func(r *kgo.Record, at time.Time) {
		id, _ := testenv.Header(r, record.HeaderID)
		rec.Seen(id, Seen{At: at, Stamp: r.Timestamp})
	}, kgo.ConsumeTopics(d.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
}

// runApp runs fn in a goroutine until scope closes and waits (bounded) for
// it to return.
func runApp(scope *tbenv.TB, name string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	scope.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				scope.Logf("%s stopped with: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			scope.Logf("%s did not stop within 30s", name)
		}
	})
}
