package kafkatopic

import (
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/delayq/delayq/internal/testenv"
)

func TestMissingThenCreated(t *testing.T) {
	k := testenv.StartKafka(t, "there")
	cl := &kafka.Client{Addr: kafka.TCP(k.Brokers...), Transport: k.KafkaGoTransport(t)}
	missing, err := MissingTopics(t.Context(), cl, []string{"there", "absent.a", "absent.b"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(missing, []string{"absent.a", "absent.b"}) {
		t.Fatalf("missing %v, want [absent.a absent.b]", missing)
	}
	if err := CreateTopics(t.Context(), cl, []string{"absent.a", "there"}, 3, 1); err != nil {
		t.Fatalf("create (one exists already): %v", err)
	}
	missing, err = MissingTopics(t.Context(), cl, []string{"there", "absent.a", "absent.b"})
	if err != nil || !slices.Equal(missing, []string{"absent.b"}) {
		t.Fatalf("after create: missing %v, %v; want [absent.b]", missing, err)
	}
}
