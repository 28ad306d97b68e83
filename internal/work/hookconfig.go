package work

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/delayq/delayq/internal/outcome"
	"github.com/delayq/delayq/internal/record"
)

// Outcome hooks in the DQ_WORK_CONFIG file:
//
//	{"hooks": {
//	  "order.charge": {"on_success": "https://shop/receipt", "on_failure": "https://shop/charge-failed", "timeout": "5s"},
//	  "*":            {"on_failure": "https://ops/dead-task"},
//	  "health.ping":  {}
//	}}
//
// A type's own entry replaces the "*" entry as a whole (a field it leaves
// out is not taken from "*"): "health.ping" above has no hooks at all, and
// "order.charge" does not call https://ops/dead-task.

// OutcomeHooksDefault is the "hooks" entry for every type without one of
// its own.
const OutcomeHooksDefault = "*"

// Defaults of an outcome hook entry's timeout and max_age.
const (
	DefaultHookTimeout = 10 * time.Second
	DefaultHookMaxAge  = time.Hour
)

// OutcomeHooks are the outcome hooks of one task type (or of every type
// without its own entry, under OutcomeHooksDefault): URLs POSTed each
// outcome record of the type with outcome succeeded (OnSuccess) or dead
// (OnFailure).
type OutcomeHooks struct {
	OnSuccess string        // on_success: "" none
	OnFailure string        // on_failure: "" none
	Timeout   time.Duration // timeout: of each HTTP request (DefaultHookTimeout when not given)
	// MaxAge (max_age): outcomes that finished longer ago than this when
	// the hooks consumer reads them call no hook (counted as skipped
	// "stale"), so that turning hooks on does not replay the topic's
	// whole retention and a consumer back from a long outage does not
	// send notifications days late. DefaultHookMaxAge when not given.
	MaxAge time.Duration
}

// URL is the hook for outcome ("" none) and its name (on_success,
// on_failure).
func (h OutcomeHooks) URL(outcome string) (url, name string) {
	switch outcome {
	case record.OutcomeSucceeded:
		return h.OnSuccess, hookOnSuccess
	case record.OutcomeDead:
		return h.OnFailure, hookOnFailure
	}
	return "", ""
}

// The hook names, as in the file and in the metrics' "hook" label.
const (
	hookOnSuccess = "on_success"
	hookOnFailure = "on_failure"
)

// hooksFor is the entry that applies to typ (none: the zero entry, no
// URLs).
func hooksFor(hooks map[string]OutcomeHooks, typ string) OutcomeHooks {
	if h, ok := hooks[typ]; ok {
		return h
	}
	return hooks[OutcomeHooksDefault]
}

// anyHook reports whether hooks name at least one URL: no consumer runs
// otherwise.
func anyHook(hooks map[string]OutcomeHooks) bool {
	for _, h := range hooks {
		if h.OnSuccess != "" || h.OnFailure != "" {
			return true
		}
	}
	return false
}

// parseHooks reads the "hooks" object of the work config file: strict
// (unknown fields and bad durations are errors naming the type and the
// field). URLs are checked by validateHooks.
func parseHooks(raw json.RawMessage) (map[string]OutcomeHooks, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("hooks: %w", err)
	}
	out := make(map[string]OutcomeHooks, len(entries))
	for _, typ := range slices.Sorted(maps.Keys(entries)) { // the first error in a stable order
		if typ == "" {
			return nil, errors.New("hooks: an entry with an empty task type (\"*\" is every type without its own)")
		}
		var e struct {
			OnSuccess *string `json:"on_success"`
			OnFailure *string `json:"on_failure"`
			Timeout   string  `json:"timeout"`
			MaxAge    string  `json:"max_age"`
		}
		dec := json.NewDecoder(bytes.NewReader(entries[typ]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("hooks: type %q: %w", typ, err)
		}
		var h OutcomeHooks
		for _, f := range []struct {
			name string
			v    *string
			dst  *string
		}{{hookOnSuccess, e.OnSuccess, &h.OnSuccess}, {hookOnFailure, e.OnFailure, &h.OnFailure}} {
			if f.v == nil {
				continue
			}
			if *f.v == "" {
				return nil, fmt.Errorf("hooks: type %q: %s: empty URL (leave the field out for no hook)", typ, f.name)
			}
			*f.dst = *f.v
		}
		var err error
		if h.Timeout, err = hookDuration(e.Timeout, DefaultHookTimeout); err != nil {
			return nil, fmt.Errorf("hooks: type %q: timeout %q: %w", typ, e.Timeout, err)
		}
		if h.MaxAge, err = hookDuration(e.MaxAge, DefaultHookMaxAge); err != nil {
			return nil, fmt.Errorf("hooks: type %q: max_age %q: %w", typ, e.MaxAge, err)
		}
		out[typ] = h
	}
	return out, nil
}

func hookDuration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New(`a positive duration such as "5s"`)
	}
	return d, nil
}

// validateHooks checks every hook URL (http or https with a host), naming
// the type and the field, and that hooks have an outcomes topic to read.
func validateHooks(hooks map[string]OutcomeHooks, outcomesTopic string) error {
	for _, typ := range slices.Sorted(maps.Keys(hooks)) {
		h := hooks[typ]
		for _, f := range []struct{ name, url string }{{hookOnSuccess, h.OnSuccess}, {hookOnFailure, h.OnFailure}} {
			if f.url == "" {
				continue
			}
			if _, err := NewWebhook(f.url, h.Timeout, nil, nil); err != nil {
				return fmt.Errorf("work config: hooks: type %q: %s: %w", typ, f.name, err)
			}
		}
	}
	if anyHook(hooks) && !outcome.Enabled(outcomesTopic) {
		return fmt.Errorf("work config: hooks need the outcomes topic: DQ_OUTCOMES_TOPIC is %q (outcomes are not published)", outcomesTopic)
	}
	return nil
}
