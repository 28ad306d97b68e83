package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
)

type exitErr struct{ code int }

func (e exitErr) Error() string { return fmt.Sprintf("finished with code %d", e.code) }
func (e exitErr) ExitCode() int { return e.code }

func TestExitCode(t *testing.T) {
	live := t.Context()
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want int
	}{
		{"success", live, nil, 0},
		{"help", live, fmt.Errorf("parse: %w", ErrHelp), 0},
		{"signal, clean shutdown", ended, nil, 0},
		{"signal, only the cancellation", ended, fmt.Errorf("serve: %w", context.Canceled), 0},
		{"canceled without a signal", live, context.Canceled, 1},
		{"signal, but a real error", ended, errors.New("journal: disk full"), 1},
		{"error", live, errors.New("bad config"), 1},
		{"error with its code", live, fmt.Errorf("import: %w", exitErr{2}), 2},
	} {
		var out bytes.Buffer
		if got := ExitCode(c.ctx, "bin", c.err, &out); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
		if (c.want != 0) != (out.Len() > 0) || c.want != 0 && !strings.HasPrefix(out.String(), "bin: ") {
			t.Errorf("%s: stderr %q", c.name, out.String())
		}
	}
}

func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/delayq/delayq", Version: "v1.2.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "13be76f1c2a3d4e5f60718293a4b5c6d7e8f9012"}, {Key: "vcs.time", Value: "2026-11-24T02:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := version("daemon", bi, true), "daemon v1.2.0 (rev 13be76f1c2a3+dirty, 2026-11-24T02:00:00Z) go1.26.0"; got != want {
		t.Errorf("version = %q, want %q", got, want)
	}
	bi = &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/delayq/delayq"}}
	if got, want := version("dq", bi, true), "dq (devel) go1.26.0"; got != want {
		t.Errorf("version = %q, want %q", got, want)
	}
	if got := version("dq", nil, false); !strings.HasPrefix(got, "dq (devel, no build info) go") {
		t.Errorf("version without build info = %q", got)
	}
	if got := Version("work"); !strings.HasPrefix(got, "work ") {
		t.Errorf("Version = %q", got)
	}
	for _, a := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		if !IsVersionArgs(a) {
			t.Errorf("%v not a version request", a)
		}
	}
	for _, a := range [][]string{nil, {"version", "x"}, {"-h"}, {"--versions"}} {
		if IsVersionArgs(a) {
			t.Errorf("%v taken for a version request", a)
		}
	}
}
