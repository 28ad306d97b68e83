package fire

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestNotIsolatedIsTransient: a record the broker refused as too large only
// in a partition batch with an oversized one (isolate ran out of time
// before writing it alone) must come back transient, never as the
// too-large refusal that would park it and, after the grace, make a
// healthy task dead. A chaos run caught exactly that: an accepted task
// ended dead without ever being fired while Kafka was slow and a poison
// record shared its batches.
func TestNotIsolatedIsTransient(t *testing.T) {
	tooLarge := fmt.Errorf("write: %w", kafka.MessageSizeTooLarge)
	errs := []error{tooLarge, tooLarge, tooLarge, context.DeadlineExceeded}
	notIsolated(errs, []int{0, 1, 2}, map[int]bool{2: true})
	for i := range 2 {
		if brokerTooLarge(errs[i]) || !errors.Is(errs[i], errNotIsolated) || Refusal(errs[i]) != "" {
			t.Errorf("record %d, never refused alone: %v (refusal %q), want a transient errNotIsolated", i, errs[i], Refusal(errs[i]))
		}
	}
	if !brokerTooLarge(errs[2]) || Refusal(errs[2]) == "" {
		t.Errorf("record 2, refused alone: %v, want the too-large refusal kept", errs[2])
	}
	if !errors.Is(errs[3], context.DeadlineExceeded) {
		t.Errorf("an error outside big changed: %v", errs[3])
	}
}
