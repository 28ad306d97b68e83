package record

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestDeadLetter(t *testing.T) {
	m := &kafka.Message{Topic: "dq.tasks", Partition: 3, Offset: 42, Key: []byte("k"), Value: []byte("payload"),
		Headers: hdrs("dq-id", "a", "dq-attempt", "1", "dq-error", "old", "x", "y")}
	d := DeadLetter(m, strings.Repeat("e", 2000), 3, time.UnixMilli(5000), 100)
	got := map[string][]string{}
	for _, h := range d.Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	if len(got["dq-error"]) != 1 || len(got["dq-error"][0]) != 1024 || got["dq-attempt"][0] != "3" || len(got["dq-attempt"]) != 1 ||
		got["dq-dead-at"][0] != "5000" || got["dq-source-partition"][0] != "3" || got["dq-source-offset"][0] != "42" ||
		got["x"][0] != "y" || got["dq-id"][0] != "a" || string(d.Value) != "payload" || string(d.Key) != "k" || d.Topic != "" {
		t.Errorf("dead message %v value %q", got, d.Value)
	}
	d = DeadLetter(m, "why", 0, time.UnixMilli(5000), 3)
	for _, h := range d.Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	if d.Value != nil || got["dq-payload-bytes"][0] != "7" || got["dq-attempt"][1] != "1" {
		t.Errorf("dead message without value: %v %q", got, d.Value)
	}
}
