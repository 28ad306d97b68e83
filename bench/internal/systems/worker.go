package systems

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/bench/internal/tbenv"
	"github.com/delayq/delayq/worker"
)

// TopicPartitions is the partition count of every delayq topic StartDelayQ
// creates.
const TopicPartitions = 4

// WorkerOptions configures StartWorker.
type WorkerOptions struct {
	Concurrency int                // worker.Config.Concurrency
	Handler     worker.HandlerFunc // registered with HandleDefault
	OnOutcome   worker.OnOutcomeFunc
}

// StartWorker runs one delayq worker (the public worker package, in this
// process) on d's topic and namespace, with a Redis client of its own,
// until scope closes.
func StartWorker(scope *tbenv.TB, in *Infra, d *DelayQ, o WorkerOptions) *worker.Worker {
	w, err := worker.New(worker.Config{
		Brokers:     in.Kafka.Brokers,
		Group:       "work-" + d.NS,
		Topics:      []string{d.Topic},
		DeadTopic:   DeadTopic,
		Redis:       in.Redis.Client(scope),
		Namespace:   d.NS,
		Shards:      d.Shards,
		Concurrency: o.Concurrency,
		Logger:      quietLogger("worker"),
		OnOutcome:   o.OnOutcome,
	})
	if err != nil {
		scope.Fatalf("worker: %v", err)
	}
	w.HandleDefault(o.Handler)
	runApp(scope, "worker", w.Run)
	return w
}

// TopicEnd is the sum of the end offsets of d's topic's partitions: how
// many records it holds.
func (d *DelayQ) TopicEnd(ctx context.Context, cl *kgo.Client) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = d.Topic
	for p := range int32(TopicPartitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return 0, err
			}
			n += p.Offset
		}
	}
	return n, nil
}
