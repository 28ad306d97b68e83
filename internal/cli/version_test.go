package cli

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/testenv"
)

// TestEveryCommandHasHelp: -h on any command prints a usage text and ends
// in ErrHelp (exit 0), not an error.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		if c.name == "version" {
			continue
		}
		var out bytes.Buffer
		env := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		err := Run(t.Context(), []string{c.name, "-h"}, env)
		if !errors.Is(err, ErrHelp) {
			t.Errorf("dq %s -h: %v, want ErrHelp", c.name, err)
		}
		if !strings.Contains(strings.ToLower(out.String()), "usage") {
			t.Errorf("dq %s -h printed no usage: %q", c.name, out.String())
		}
	}
}

func TestVersionCommands(t *testing.T) {
	for _, args := range [][]string{{"dq", "version"}, {"dq", "--version"}, {"daemon", "version"}, {"/bin/work", "--version"}, {"dq", "app", "event", "version"}} {
		var out bytes.Buffer
		env := Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		if err := Main(t.Context(), args, env); err != nil {
			t.Errorf("%v: %v", args, err)
		}
		name := filepath.Base(args[0])
		if args[0] == "dq" && args[1] == "app" {
			name = args[2]
		}
		if got := out.String(); !strings.HasPrefix(got, name+" ") || !strings.Contains(got, runtime.Version()) {
			t.Errorf("%v printed %q, want %q ... %s", args, got, name, runtime.Version())
		}
	}
}

// TestBinaryVersionAndCleanSignalExit runs the built dq and work: dq
// version, daemon --version (dq under the name daemon, as in the image)
// and work version (cmd/work, through config.Main) print the
// build's VCS revision; a daemon stopped by SIGINT after a clean
// shutdown exits 0 (make dev relies on it), while one that cannot start
// exits 1.
func TestBinaryVersionAndCleanSignalExit(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("GOFLAGS", "-buildvcs=auto") // stamp the revision when built in a checkout
	if err := testenv.GoBuild(t.Context(), root, dir, "", "./cmd/dq", "./cmd/work"); err != nil {
		t.Fatal(err)
	}
	dq := filepath.Join(dir, "dq")
	bi, err := buildinfo.ReadFile(dq)
	if err != nil {
		t.Fatal(err)
	}
	var rev string
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			rev = s.Value[:min(12, len(s.Value))]
		}
	}
	daemon := filepath.Join(dir, "daemon")
	if err := os.Symlink(dq, daemon); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{{dq, "version"}, {dq, "--version"}, {daemon, "--version"}, {daemon, "version"}, {filepath.Join(dir, "work"), "version"}, {filepath.Join(dir, "work"), "--version"}} {
		out, err := exec.CommandContext(t.Context(), c[0], c[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
		want := filepath.Base(c[0]) + " "
		if s := string(out); !strings.HasPrefix(s, want) || !strings.HasSuffix(s, " "+bi.GoVersion+"\n") || strings.Count(s, "\n") != 1 {
			t.Errorf("%v printed %q, want %q...%s", c, s, want, bi.GoVersion)
		}
		if rev != "" && !strings.Contains(string(out), "(rev "+rev) {
			t.Errorf("%v: VCS revision %s not in %q", c, rev, out)
		}
	}

	r := testenv.StartRedis(t)
	cmd := exec.CommandContext(t.Context(), daemon)
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = append(os.Environ(), "DQ_REDIS_ADDRS="+r.Addr, "DQ_HTTP_ADDR=127.0.0.1:0", "DQ_JOURNAL_DIR="+t.TempDir(),
		"DQ_NAMESPACE=sigexit")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "the daemon started", func() bool { return strings.Contains(logs.String(), "daemon started") })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon after SIGINT: %v, want exit 0\n%s", err, logs.String())
	}

	bad := exec.CommandContext(t.Context(), daemon, "--shards", "0")
	out, err := bad.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.HasPrefix(string(out), "daemon: ") {
		t.Fatalf("bad config: %v %q, want exit 1 and daemon: ...", err, out)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// RunsApp: dq re-executes itself with the runtime's monitor kept awake
// only where it runs an application, not for its version or a
// subcommand.
func TestRunsApp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"/work"}, true},
		{[]string{"daemon", "-h"}, true},
		{[]string{"/usr/bin/event", "--shards", "4"}, true},
		{[]string{"dq", "app", "work"}, true},
		{[]string{"work", "version"}, false},
		{[]string{"dq", "app", "event", "--version"}, false},
		{[]string{"dq"}, false},
		{[]string{"dq", "dev"}, false},
		{[]string{"dq", "app"}, false},
		{[]string{"dq", "app", "nope"}, false},
		{[]string{"dq", "schedule", "t"}, false},
		{nil, false},
	} {
		if got := RunsApp(c.args); got != c.want {
			t.Errorf("RunsApp(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}
