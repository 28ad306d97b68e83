package ratelimit

import (
	"strings"
	"testing"
	"time"
)

// A rule sent without concurrency.slot_ttl gets DefaultSlotTTL, and a
// token bucket without a burst gets one second's worth of tokens (the
// rate rounded up, at least 1), so that dq limits set TYPE --concurrency 2
// and --rate 5 work without --slot-ttl and --burst.
func TestDecodeRuleDefaults(t *testing.T) {
	for _, c := range []struct {
		body      string
		slotTTL   time.Duration
		burst     int64
		tokenRule bool
	}{
		{`{"concurrency":{"limit":2}}`, DefaultSlotTTL, 0, false},
		{`{"concurrency":{"limit":2,"slot_ttl":null}}`, DefaultSlotTTL, 0, false},
		{`{"concurrency":{"limit":2,"slot_ttl":"30s"}}`, 30 * time.Second, 0, false},
		{`{"token_bucket":{"rate":5}}`, 0, 5, true},
		{`{"token_bucket":{"rate":2.5,"burst":0}}`, 0, 3, true},
		{`{"token_bucket":{"rate":0.1}}`, 0, 1, true},
		{`{"token_bucket":{"rate":5,"burst":20}}`, 0, 20, true},
	} {
		r, err := DecodeRule(strings.NewReader(c.body), 0)
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		if c.slotTTL != 0 && (r.Concurrency == nil || r.Concurrency.SlotTTL.D() != c.slotTTL) {
			t.Errorf("%s: concurrency %+v, want slot_ttl %s", c.body, r.Concurrency, c.slotTTL)
		}
		if c.tokenRule && (r.TokenBucket == nil || r.TokenBucket.Burst != c.burst) {
			t.Errorf("%s: token bucket %+v, want burst %d", c.body, r.TokenBucket, c.burst)
		}
	}
	// the defaults do not hide a wrong value
	for _, body := range []string{`{"concurrency":{"limit":2,"slot_ttl":"1ms"}}`, `{"token_bucket":{"rate":0}}`, `{"token_bucket":{"rate":5,"reserve":5}}`} {
		if _, err := DecodeRule(strings.NewReader(body), 0); err == nil {
			t.Errorf("%s accepted", body)
		}
	}
}
