package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progressBar draws import progress on a terminal (redrawn in place, at
// most ten times a second) or, when stderr is not a terminal, as a line at
// every tenth of the work.
type progressBar struct {
	w        io.Writer
	tty      bool
	total    int64
	start    time.Time
	startAt  int64
	last     time.Time
	lastTick int64
	drawn    bool
}

func newProgressBar(w io.Writer, total, done int64) *progressBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressBar{w: w, tty: tty, total: total, start: time.Now(), startAt: done, lastTick: done * 10 / max(total, 1)}
}

func (p *progressBar) update(done, accepted, rejected int64) {
	now := time.Now()
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond && done < p.total {
			return
		}
		p.last = now
		fmt.Fprintf(p.w, "\r%s", p.line(done, accepted, rejected, now))
		p.drawn = true
		return
	}
	if tick := done * 10 / max(p.total, 1); tick > p.lastTick {
		p.lastTick = tick
		fmt.Fprintln(p.w, p.line(done, accepted, rejected, now))
	}
}

func (p *progressBar) line(done, accepted, rejected int64, now time.Time) string {
	const width = 30
	frac := 1.0
	if p.total > 0 {
		frac = min(float64(done)/float64(p.total), 1)
	}
	fill := int(frac * width)
	rate := 0.0
	if secs := now.Sub(p.start).Seconds(); secs > 0 {
		rate = float64(done-p.startAt) / secs
	}
	return fmt.Sprintf("[%s%s] %3.0f%% %d/%d lines  %.0f/s  accepted %d  rejected %d ",
		strings.Repeat("#", fill), strings.Repeat(".", width-fill), frac*100, done, p.total, rate, accepted, rejected)
}

func (p *progressBar) finish() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}
