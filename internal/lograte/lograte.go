// Package lograte rate-limits a repeated warning: one WARN line per
// period, the ones in between at DEBUG, and the next WARN says how many
// were held back. The worker's dead-letter writer and the outcome
// publisher use it for their "dropped" warnings, which can come once per
// record while Kafka is down.
package lograte

import (
	"log/slog"
	"sync"
	"time"
)

// Warner logs at WARN at most once per Every (the zero Warner is not
// usable: set Log and Every).
type Warner struct {
	Log   *slog.Logger
	Every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Warn logs msg at WARN unless one was logged less than Every ago (then
// at DEBUG); a WARN after suppressed ones adds "suppressed_since_last".
func (w *Warner) Warn(msg string, args ...any) {
	w.mu.Lock()
	now := time.Now()
	if !w.last.IsZero() && now.Sub(w.last) < w.Every {
		w.suppressed++
		w.mu.Unlock()
		w.Log.Debug(msg, args...)
		return
	}
	n := w.suppressed
	w.last, w.suppressed = now, 0
	w.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed_since_last", n)
	}
	w.Log.Warn(msg, args...)
}
