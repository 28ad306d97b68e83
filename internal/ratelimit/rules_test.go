package ratelimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDecodeRuleGood(t *testing.T) {
	cases := []struct {
		name string
		body string
		want Rule
	}{
		{"window only", `{"window_quota":{"limit":600,"window":"10s"}}`,
			Rule{WindowQuota: &WindowQuota{Limit: 600, Window: dur(10 * time.Second)}}},
		{"bucket only", `{"token_bucket":{"rate":200,"burst":50}}`,
			Rule{TokenBucket: &TokenBucket{Rate: 200, Burst: 50}}},
		{"bucket with reserve", `{"token_bucket":{"rate":0.5,"burst":10,"reserve":3,"min_priority":-2}}`,
			Rule{TokenBucket: &TokenBucket{Rate: 0.5, Burst: 10, Reserve: 3, MinPriority: -2}}},
		{"concurrency only", `{"concurrency":{"limit":5,"slot_ttl":"1m30s"}}`,
			Rule{Concurrency: &Concurrency{Limit: 5, SlotTTL: dur(90 * time.Second)}}},
		{"all three, white space, charset", " {\"window_quota\":{\"limit\":1,\"window\":\"24h\"},\n\"token_bucket\":{\"rate\":1000000,\"burst\":1000000000,\"reserve\":999999999,\"min_priority\":1000},\"concurrency\":{\"limit\":1000000000,\"slot_ttl\":\"1s\"}}\n",
			Rule{
				WindowQuota: &WindowQuota{Limit: 1, Window: dur(24 * time.Hour)},
				TokenBucket: &TokenBucket{Rate: 1e6, Burst: 1e9, Reserve: 1e9 - 1, MinPriority: 1000},
				Concurrency: &Concurrency{Limit: 1e9, SlotTTL: dur(time.Second)},
			}},
		{"null kind is absent", `{"window_quota":null,"concurrency":{"limit":2,"slot_ttl":"5s"}}`,
			Rule{Concurrency: &Concurrency{Limit: 2, SlotTTL: dur(5 * time.Second)}}},
		// encoding/json matches field names case-insensitively; the meaning
		// is the same, so this is accepted.
		{"case-different field name", `{"Window_Quota":{"LIMIT":1,"window":"1s"}}`,
			Rule{WindowQuota: &WindowQuota{Limit: 1, Window: dur(time.Second)}}},
		{"millisecond window", `{"window_quota":{"limit":3,"window":"1ms"}}`,
			Rule{WindowQuota: &WindowQuota{Limit: 3, Window: dur(time.Millisecond)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := DecodeRule(strings.NewReader(c.body), 0)
			if err != nil {
				t.Fatalf("DecodeRule: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", show(got), show(c.want))
			}
		})
	}
}

func show(r Rule) string { b, _ := json.Marshal(r); return string(b) }

func TestDecodeRuleBad(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		want  error
		field string // expected at the start of a FieldError message, or a substring otherwise
	}{
		{"empty body", ``, ErrInvalidJSON, "empty body"},
		{"empty rule", `{}`, ErrInvalidRule, "rule:"},
		{"null", `null`, ErrInvalidJSON, "must be a JSON object"},
		{"array", `[]`, ErrInvalidJSON, "must be a JSON object"},
		{"string", `"x"`, ErrInvalidJSON, "must be a JSON object"},
		{"syntax", `{"window_quota":{`, ErrInvalidJSON, "truncated"},
		{"garbage", `{"window_quota"::}`, ErrInvalidJSON, "invalid character"},
		{"trailing data", `{"concurrency":{"limit":1,"slot_ttl":"1s"}} {}`, ErrInvalidJSON, "trailing"},
		{"unknown top field", `{"window":{"limit":1}}`, ErrUnknownField, `"window"`},
		{"unknown nested field", `{"window_quota":{"limit":1,"window":"1s","burst":3}}`, ErrUnknownField, `"burst"`},
		{"kind not an object", `{"window_quota":5}`, ErrInvalidRule, "window_quota:"},
		{"negative limit", `{"window_quota":{"limit":-1,"window":"1s"}}`, ErrInvalidRule, "window_quota.limit:"},
		{"zero limit", `{"window_quota":{"limit":0,"window":"1s"}}`, ErrInvalidRule, "window_quota.limit:"},
		{"missing limit", `{"window_quota":{"window":"1s"}}`, ErrInvalidRule, "window_quota.limit:"},
		{"limit too large", `{"window_quota":{"limit":1000000001,"window":"1s"}}`, ErrInvalidRule, "window_quota.limit:"},
		{"limit beyond int64", `{"window_quota":{"limit":1e30,"window":"1s"}}`, ErrInvalidRule, "window_quota.limit:"},
		{"fractional limit", `{"window_quota":{"limit":1.5,"window":"1s"}}`, ErrInvalidRule, "window_quota.limit:"},
		{"limit as string", `{"window_quota":{"limit":"5","window":"1s"}}`, ErrInvalidRule, "window_quota.limit:"},
		{"zero window", `{"window_quota":{"limit":1,"window":"0s"}}`, ErrInvalidRule, "window_quota.window:"},
		{"negative window", `{"window_quota":{"limit":1,"window":"-10s"}}`, ErrInvalidRule, "window_quota.window:"},
		{"missing window", `{"window_quota":{"limit":1}}`, ErrInvalidRule, "window_quota.window:"},
		{"window over 24h", `{"window_quota":{"limit":1,"window":"24h0m0.001s"}}`, ErrInvalidRule, "window_quota.window:"},
		{"window overflows", `{"window_quota":{"limit":1,"window":"9999999999h"}}`, ErrInvalidRule, "window_quota.window:"},
		{"window as number", `{"window_quota":{"limit":1,"window":10}}`, ErrInvalidRule, "window_quota.window:"},
		{"window not a duration", `{"window_quota":{"limit":1,"window":"soon"}}`, ErrInvalidRule, "window_quota.window:"},
		{"window sub-millisecond", `{"window_quota":{"limit":1,"window":"1500us"}}`, ErrInvalidRule, "window_quota.window:"},
		{"zero rate", `{"token_bucket":{"rate":0,"burst":5}}`, ErrInvalidRule, "token_bucket.rate:"},
		{"negative rate", `{"token_bucket":{"rate":-3,"burst":5}}`, ErrInvalidRule, "token_bucket.rate:"},
		{"huge rate", `{"token_bucket":{"rate":1000001,"burst":5}}`, ErrInvalidRule, "token_bucket.rate:"},
		{"rate overflows float", `{"token_bucket":{"rate":1e400,"burst":5}}`, ErrInvalidRule, "token_bucket.rate:"},
		{"negative burst", `{"token_bucket":{"rate":3,"burst":-1}}`, ErrInvalidRule, "token_bucket.burst:"},
		{"negative burst", `{"token_bucket":{"rate":3,"burst":-1}}`, ErrInvalidRule, "token_bucket.burst:"},
		{"huge burst", `{"token_bucket":{"rate":3,"burst":9223372036854775807}}`, ErrInvalidRule, "token_bucket.burst:"},
		{"reserve = burst", `{"token_bucket":{"rate":3,"burst":5,"reserve":5}}`, ErrInvalidRule, "token_bucket.reserve:"},
		{"negative reserve", `{"token_bucket":{"rate":3,"burst":5,"reserve":-1}}`, ErrInvalidRule, "token_bucket.reserve:"},
		{"min_priority out of range", `{"token_bucket":{"rate":3,"burst":5,"min_priority":1001}}`, ErrInvalidRule, "token_bucket.min_priority:"},
		{"zero concurrency", `{"concurrency":{"limit":0,"slot_ttl":"5s"}}`, ErrInvalidRule, "concurrency.limit:"},
		{"negative concurrency", `{"concurrency":{"limit":-5,"slot_ttl":"5s"}}`, ErrInvalidRule, "concurrency.limit:"},
		{"slot_ttl below 1s", `{"concurrency":{"limit":5,"slot_ttl":"999ms"}}`, ErrInvalidRule, "concurrency.slot_ttl:"},
		{"slot_ttl above 24h", `{"concurrency":{"limit":5,"slot_ttl":"25h"}}`, ErrInvalidRule, "concurrency.slot_ttl:"},
		{"slot_ttl not a duration", `{"concurrency":{"limit":5,"slot_ttl":"soon"}}`, ErrInvalidRule, "concurrency.slot_ttl:"},
		{"second kind bad", `{"window_quota":{"limit":5,"window":"1s"},"concurrency":{"limit":5,"slot_ttl":"0s"}}`, ErrInvalidRule, "concurrency.slot_ttl:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeRule(strings.NewReader(c.body), 0)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			var fe *FieldError
			if errors.As(err, &fe) {
				if !strings.HasPrefix(err.Error(), c.field) {
					t.Fatalf("message %q should start with %q", err, c.field)
				}
			} else if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("message %q should contain %q", err, c.field)
			}
		})
	}
}

func TestDecodeRuleTooLarge(t *testing.T) {
	body := `{"concurrency":{"limit":5,"slot_ttl":"5s"}}` + strings.Repeat(" ", 100)
	if _, err := DecodeRule(strings.NewReader(body), int64(len(body))); err != nil {
		t.Fatalf("body of exactly the limit: %v", err)
	}
	if _, err := DecodeRule(strings.NewReader(body), int64(len(body)-1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over: %v, want ErrTooLarge", err)
	}
	// a huge body is not read beyond the limit
	huge := strings.NewReader(`{"concurrency":` + strings.Repeat(" ", 10<<20) + `}`)
	if _, err := DecodeRule(huge, 1024); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("huge body: %v", err)
	}
	if huge.Len() < 9<<20 {
		t.Fatalf("DecodeRule read %d bytes of a body over its limit", 10<<20-huge.Len())
	}
}

func TestRuleJSONShape(t *testing.T) {
	r := Rule{
		WindowQuota: &WindowQuota{Limit: 600, Window: dur(10 * time.Second)},
		TokenBucket: &TokenBucket{Rate: 200, Burst: 50, Reserve: 10, MinPriority: 5},
		Concurrency: &Concurrency{Limit: 5, SlotTTL: dur(time.Minute)},
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"window_quota":{"limit":600,"window":"10s"},"token_bucket":{"rate":200,"burst":50,"reserve":10,"min_priority":5},"concurrency":{"limit":5,"slot_ttl":"1m0s"}}`
	if string(b) != want {
		t.Fatalf("JSON\n got %s\nwant %s", b, want)
	}
	back, err := DecodeRule(bytes.NewReader(b), 0)
	if err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip: %v %s", err, show(back))
	}
	if b, _ := json.Marshal(Rule{Concurrency: r.Concurrency}); string(b) != `{"concurrency":{"limit":5,"slot_ttl":"1m0s"}}` {
		t.Fatalf("subset JSON: %s", b)
	}
}

func TestValidateType(t *testing.T) {
	good := []string{"email.send", "a", "订单.取消", strings.Repeat("x", 200), "weird{tag}"}
	for _, typ := range good {
		if err := ValidateType(typ); err != nil {
			t.Errorf("ValidateType(%q): %v", typ, err)
		}
	}
	bad := []string{"", "a/b", "a b", "tab\t", "nl\n", strings.Repeat("x", 201), "\xff", "ctl\x00"}
	for _, typ := range bad {
		if err := ValidateType(typ); !errors.Is(err, ErrInvalidType) {
			t.Errorf("ValidateType(%q) = %v, want ErrInvalidType", typ, err)
		}
	}
}

// FuzzDecodeRule: DecodeRule never panics, every error is one of the
// sentinels, and whatever it accepts is valid and survives encode+decode
// unchanged.
func FuzzDecodeRule(f *testing.F) {
	seeds := []string{
		`{"window_quota":{"limit":600,"window":"10s"}}`,
		`{"token_bucket":{"rate":200,"burst":50,"reserve":10,"min_priority":5}}`,
		`{"concurrency":{"limit":5,"slot_ttl":"30s"}}`,
		`{"window_quota":{"limit":1,"window":"1ms"},"token_bucket":{"rate":0.001,"burst":1},"concurrency":{"limit":1,"slot_ttl":"24h"}}`,
		`{"window_quota":{"limit":-1,"window":"-1s"}}`,
		`{"token_bucket":{"rate":1e400,"burst":1e30}}`,
		`{"window_quota":{"limit":1,"window":"1h2m3.004s"}}`,
		`{"concurrency":{"limit":5,"slot_ttl":"5s","x":1}}`,
		`{}`, `null`, `[]`, `{"window_quota":null}`, `{"a":`, "\x00",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRule(bytes.NewReader(data), 4096)
		if err != nil {
			if !errors.Is(err, ErrInvalidJSON) && !errors.Is(err, ErrUnknownField) &&
				!errors.Is(err, ErrInvalidRule) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid rule: %v", err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		back, err := DecodeRule(bytes.NewReader(b), 4096)
		if err != nil {
			t.Fatalf("re-decode %s: %v", b, err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip changed the rule: %s -> %s", show(r), show(back))
		}
	})
}

// TestValidateStoredType: "." and ".." cannot name a new rule (no URL
// carries them as /v1/limits/{type}) but a rule stored before may have
// them and is still read and deleted.
func TestValidateStoredType(t *testing.T) {
	for _, typ := range []string{".", ".."} {
		if err := ValidateType(typ); !errors.Is(err, ErrInvalidType) || !strings.Contains(err.Error(), "must not be") {
			t.Errorf("ValidateType(%q) = %v, want ErrInvalidType", typ, err)
		}
		if err := ValidateStoredType(typ); err != nil {
			t.Errorf("ValidateStoredType(%q): %v", typ, err)
		}
	}
	for _, typ := range []string{"", "a/b", "/", "a b"} {
		if err := ValidateStoredType(typ); !errors.Is(err, ErrInvalidType) {
			t.Errorf("ValidateStoredType(%q) = %v, want ErrInvalidType", typ, err)
		}
	}
}
