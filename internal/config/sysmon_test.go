package config_test

import (
	"slices"
	"testing"

	"github.com/delayq/delayq/internal/config"
)

// SysmonEnv adds the monitor's setting to GODEBUG, keeps every other
// variable and GODEBUG setting, and leaves an environment alone whose
// GODEBUG names schedtrace (the operator's choice, or the process after
// its exec: no second exec).
func TestSysmonEnv(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want []string // nil: unchanged, no exec
	}{
		{[]string{"PATH=/bin", "DQ_SHARDS=4"}, []string{"PATH=/bin", "DQ_SHARDS=4", "GODEBUG=" + config.SysmonGodebug}},
		{nil, []string{"GODEBUG=" + config.SysmonGodebug}},
		{[]string{"GODEBUG=", "A=1"}, []string{"A=1", "GODEBUG=" + config.SysmonGodebug}},
		{[]string{"GODEBUG=http2client=0,gctrace=1", "A=1"}, []string{"A=1", "GODEBUG=http2client=0,gctrace=1," + config.SysmonGodebug}},
		{[]string{"GODEBUG=schedtrace=0", "A=1"}, nil},
		{[]string{"A=1", "GODEBUG=gctrace=1, schedtrace=1000"}, nil},
		{[]string{"GODEBUG=" + config.SysmonGodebug}, nil},
		// a variable twice: Go reads the first
		{[]string{"GODEBUG=gctrace=1", "A=1", "GODEBUG=schedtrace=0"}, []string{"A=1", "GODEBUG=gctrace=1," + config.SysmonGodebug}},
	} {
		got, add := config.SysmonEnv(slices.Clone(c.in))
		if c.want == nil {
			if add || !slices.Equal(got, c.in) {
				t.Errorf("SysmonEnv(%q) = %q, %v; want it unchanged, false", c.in, got, add)
			}
			continue
		}
		if !add || !slices.Equal(got, c.want) {
			t.Errorf("SysmonEnv(%q) = %q, %v; want %q, true", c.in, got, add, c.want)
		}
	}
}
