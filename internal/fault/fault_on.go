//go:build dqfault || dqplant

package fault

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether this build has fault injection.
const Enabled = true

var (
	points = map[string]float64{}
	skew   time.Duration
	mu     sync.Mutex
	rnd    *rand.Rand
)

func init() {
	if err := Configure(os.Getenv("DQ_FAULT_CRASH"), os.Getenv("DQ_FAULT_SEED"), os.Getenv("DQ_FAULT_CLOCK_SKEW")); err != nil {
		fmt.Fprintln(os.Stderr, "delayq: ignoring fault injection settings:", err)
	}
}

// Configure parses the three settings (see the package comment); the
// binaries call it once, from init, with the environment.
func Configure(crash, seed, clockSkew string) error {
	mu.Lock()
	defer mu.Unlock()
	points = map[string]float64{}
	skew = 0
	s := uint64(time.Now().UnixNano()) ^ uint64(os.Getpid())
	if seed != "" {
		v, err := strconv.ParseUint(seed, 10, 64)
		if err != nil {
			return fmt.Errorf("DQ_FAULT_SEED %q: %w", seed, err)
		}
		s = v
	}
	rnd = rand.New(rand.NewPCG(s, s>>1|1))
	for _, part := range strings.Split(crash, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, p, ok := strings.Cut(part, "=")
		prob, err := strconv.ParseFloat(p, 64)
		if !ok || err != nil || prob < 0 || prob > 1 {
			return fmt.Errorf("DQ_FAULT_CRASH %q: want name=probability (0..1)", part)
		}
		points[name] = prob
	}
	if clockSkew != "" {
		d, err := time.ParseDuration(clockSkew)
		if err != nil {
			return fmt.Errorf("DQ_FAULT_CLOCK_SKEW %q: %w", clockSkew, err)
		}
		skew = d
	}
	return nil
}

// Point is a named step of a critical path: when DQ_FAULT_CRASH names it,
// the process dies there (SIGKILL) with the configured probability.
func Point(name string) {
	mu.Lock()
	p, ok := points[name]
	hit := ok && rnd.Float64() < p
	mu.Unlock()
	if hit {
		fmt.Fprintf(os.Stderr, "delayq: fault injection: SIGKILL at %s\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns: the signal is on its way
	}
}

// Now is the process' wall clock, skewed by DQ_FAULT_CLOCK_SKEW.
func Now() time.Time {
	mu.Lock()
	d := skew
	mu.Unlock()
	return time.Now().Add(d)
}
