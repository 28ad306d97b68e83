package fire

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/testenv"
)

func TestKafkaFailsOnlyTheRecordsKafkaRefuses(t *testing.T) {
	t.Parallel()
	k := testenv.StartKafka(t, "good.topic", "refused.topic")
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "refused.topic", Err: kerr.InvalidRecord, Count: -1})
	p := NewKafka(KafkaConfig{Brokers: k.Brokers, MaxAttempts: 2, WriteTimeout: 2 * time.Second})
	defer p.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	msgs := []kafka.Message{
		{Topic: "good.topic", Key: []byte("a"), Value: []byte("1")},
		{Topic: "missing.topic", Key: []byte("b"), Value: []byte("2")}, // auto-creation is off
		{Topic: "refused.topic", Key: []byte("c"), Value: []byte("3")},
		{Topic: "good.topic", Key: []byte("d"), Value: make([]byte, 2<<20)}, // larger than a batch may be
		{Topic: "good.topic", Key: []byte("e"), Value: []byte("5")},
	}
	errs := p.Produce(ctx, msgs)
	if errs[0] != nil || errs[4] != nil {
		t.Fatalf("good records failed: %v", errs)
	}
	if errs[1] == nil || IsPermanent(errs[1]) {
		t.Errorf("record to a missing topic: %v, want a retryable error", errs[1])
	}
	if errs[2] == nil || !IsPermanent(errs[2]) {
		t.Errorf("refused record: %v, want a permanent error", errs[2])
	}
	var tooLarge kafka.MessageTooLargeError
	if !errors.As(errs[3], &tooLarge) || !IsPermanent(errs[3]) {
		t.Errorf("oversized record: %v, want MessageTooLargeError", errs[3])
	}
	if k.Cluster.TopicInfo("missing.topic") != nil {
		t.Error("the writer created a topic although auto-creation is off")
	}
}
