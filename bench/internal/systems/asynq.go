package systems

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hibiken/asynq"

	"github.com/delayq/delayq/bench/internal/tbenv"
)

// AsynqType is the task type every benchmark task has.
const AsynqType = "bench"

// AsynqOptions configures StartAsynq.
type AsynqOptions struct {
	// Serve starts an asynq.Server whose handler records its start time
	// into Record.
	Serve  bool
	Record *Recorder
	// DelayedTaskCheckInterval and TaskCheckInterval are asynq.Config's
	// fields of the same names (0: asynq's defaults, 5s and 1s).
	DelayedTaskCheckInterval time.Duration
	TaskCheckInterval        time.Duration
	// Concurrency is asynq.Config.Concurrency.
	Concurrency int
	// PoolSize is the client's Redis connection pool (go-redis' default
	// is 10 per CPU).
	PoolSize int
	// Handle, when set, is the server's handler instead of the recorder.
	Handle func(ctx context.Context, t *asynq.Task) error
}

// Asynq is an asynq client (and server) on the shared Redis.
type Asynq struct {
	Client    *asynq.Client
	Inspector *asynq.Inspector
	Queue     string
}

// StartAsynq starts the client, the inspector and, with Serve, the
// server; all stop when scope closes.
func StartAsynq(scope *tbenv.TB, in *Infra, o AsynqOptions) *Asynq {
	opt := asynq.RedisClientOpt{Addr: in.Redis.Addr, PoolSize: o.PoolSize}
	a := &Asynq{Client: asynq.NewClient(opt), Inspector: asynq.NewInspector(opt), Queue: "default"}
	scope.Cleanup(func() { _ = a.Client.Close(); _ = a.Inspector.Close() })
	if o.Serve {
		StartAsynqServer(scope, in, o)
	}
	return a
}

// StartAsynqServer starts an asynq.Server for AsynqType tasks (o's
// Concurrency and check intervals) that stops when scope closes. Its
// handler is o.Handle when set, else one that records its start time into
// o.Record (when set) and returns nil.
func StartAsynqServer(scope *tbenv.TB, in *Infra, o AsynqOptions) {
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: in.Redis.Addr}, asynq.Config{
		Concurrency:              o.Concurrency,
		DelayedTaskCheckInterval: o.DelayedTaskCheckInterval,
		TaskCheckInterval:        o.TaskCheckInterval,
		Logger:                   quietAsynqLogger{},
		LogLevel:                 asynq.ErrorLevel,
		ShutdownTimeout:          5 * time.Second,
	})
	mux := asynq.NewServeMux()
	handle := o.Handle
	if handle == nil {
		rec := o.Record
		handle = func(ctx context.Context, t *asynq.Task) error {
			at := time.Now()
			if rec != nil {
				id, _ := asynq.GetTaskID(ctx)
				rec.Seen(id, Seen{At: at})
			}
			return nil
		}
	}
	mux.HandleFunc(AsynqType, handle)
	if err := srv.Start(mux); err != nil {
		scope.Fatalf("start asynq server: %v", err)
	}
	scope.Cleanup(srv.Shutdown)
}

// quietAsynqLogger prints asynq's errors only.
type quietAsynqLogger struct{}

func (quietAsynqLogger) Debug(args ...any) {}
func (quietAsynqLogger) Info(args ...any)  {}
func (quietAsynqLogger) Warn(args ...any)  {}
func (quietAsynqLogger) Error(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"asynq error:"}, args...)...)
}
func (quietAsynqLogger) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"asynq fatal:"}, args...)...)
	os.Exit(1)
}
