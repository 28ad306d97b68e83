package journal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The crash tests re-run this test binary as a child that appends to a
// journal and dies by SIGKILL; the parent then reopens the journal and checks
// that every Append the child saw return is there.
const (
	crashChildEnv = "DELAYQ_JOURNAL_CRASH_CHILD_DIR" // journal dir; set only in the child
	crashModeEnv  = "DELAYQ_JOURNAL_CRASH_MODE"      // "self:<K>" or "parent"
	crashWriters  = 4                                // appending goroutines in "parent" mode
)

func crashData(g, i int) string { return fmt.Sprintf("g%d-i%d-%s", g, i, strings.Repeat("x", i%97)) }

// crashChild is the child's main. Mode "self:K" appends entries 1..K one by
// one and SIGKILLs itself right after the Append of K returns. Mode "parent"
// appends from crashWriters goroutines until the parent kills it. Each
// returned Append is reported on stdout as "ack <g> <i> <seq>" before the
// next one starts.
func crashChild(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	j, err := Open(dir)
	if err != nil {
		fail(err)
	}
	var mu sync.Mutex
	ack := func(g, i int, seq uint64) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(os.Stdout, "ack %d %d %d\n", g, i, seq); err != nil {
			fail(err)
		}
	}
	ctx := context.Background() // the child process is its own main
	appendOne := func(g, i int) uint64 {
		seqs, err := j.Append(ctx, Entry{ID: fmt.Sprintf("g%d", g), Data: []byte(crashData(g, i))})
		if err != nil {
			fail(err)
		}
		return seqs[0]
	}

	mode := os.Getenv(crashModeEnv)
	if k, ok := strings.CutPrefix(mode, "self:"); ok {
		n, err := strconv.Atoi(k)
		if err != nil {
			fail(err)
		}
		for i := 1; ; i++ {
			seq := appendOne(0, i)
			if i == n {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // right after Append returned for K
				select {}
			}
			ack(0, i, seq)
		}
	}

	// "parent": run until killed; a safety limit ends a child the parent forgot.
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for g := range crashWriters {
		wg.Go(func() {
			for i := 1; time.Now().Before(deadline); i++ {
				ack(g, i, appendOne(g, i))
			}
		})
	}
	wg.Wait()
	fail(fmt.Errorf("not killed within a minute"))
}

type ackLine struct {
	g, i int
	seq  uint64
}

// runCrashChild starts the child on dir in mode, reads its acks, and SIGKILLs
// it after killAfter acks (0: the child kills itself). It returns every ack
// the child wrote before it died.
func runCrashChild(t *testing.T, dir, mode string, killAfter int) []ackLine {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashModeEnv+"="+mode)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	var acks []ackLine
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var a ackLine
		if _, err := fmt.Sscanf(sc.Text(), "ack %d %d %d", &a.g, &a.i, &a.seq); err != nil {
			t.Errorf("child wrote %q: %v", sc.Text(), err)
			continue
		}
		acks = append(acks, a)
		if killAfter > 0 && len(acks) == killAfter {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("kill child: %v", err)
			}
			// Keep reading: acks already in the pipe were returned Appends too.
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v; stderr:\n%s", err, stderr.String())
	}
	return acks
}

// TestCrashSelfKill: the child SIGKILLs itself right after Append returned
// for entry K; entries 1..K are all there after reopening.
func TestCrashSelfKill(t *testing.T) {
	const k = 137
	dir := t.TempDir()
	acks := runCrashChild(t, dir, "self:"+strconv.Itoa(k), 0)
	if len(acks) != k-1 {
		t.Fatalf("child acked %d entries before killing itself, want %d", len(acks), k-1)
	}

	j := openT(t, dir)
	es := peekT(t, j, 10*k)
	if len(es) != k || j.Len() != k {
		t.Fatalf("after the crash: %d entries, Len %d; want %d", len(es), j.Len(), k)
	}
	for n, e := range es {
		i := n + 1
		if e.Seq != uint64(i) || e.ID != "g0" || string(e.Data) != crashData(0, i) {
			t.Fatalf("entry %d = {%d %q %q}, want {%d g0 %q}", i, e.Seq, e.ID, e.Data, i, crashData(0, i))
		}
	}
	// The journal goes on where the dead process stopped.
	if seqs := appendT(t, j, entry("after", "x")); seqs[0] != k+1 {
		t.Fatalf("first seq after the crash = %d, want %d", seqs[0], k+1)
	}
}

// TestCrashKilledMidWrite: the parent SIGKILLs a child with several
// goroutines appending, so the kill lands at an arbitrary point, often inside
// a commit. The journal opens cleanly, and every acked entry is there; per
// goroutine, what is there is a prefix of what it appended.
func TestCrashKilledMidWrite(t *testing.T) {
	dir := t.TempDir()
	acks := runCrashChild(t, dir, "parent", 300)

	j := openT(t, dir)
	es := peekT(t, j, 1<<20)
	if j.Len() != len(es) {
		t.Fatalf("Len = %d, Peek found %d", j.Len(), len(es))
	}
	bySeq := make(map[uint64]Entry, len(es))
	next := make([]int, crashWriters) // next i expected per goroutine
	for n, e := range es {
		if n > 0 && e.Seq <= es[n-1].Seq {
			t.Fatalf("seqs out of order: %d after %d", e.Seq, es[n-1].Seq)
		}
		var g, i int
		if _, err := fmt.Sscanf(string(e.Data), "g%d-i%d-", &g, &i); err != nil || g < 0 || g >= crashWriters {
			t.Fatalf("seq %d holds unexpected data %q", e.Seq, e.Data)
		}
		if i != next[g]+1 || string(e.Data) != crashData(g, i) || e.ID != fmt.Sprintf("g%d", g) {
			t.Fatalf("seq %d = %q for goroutine %d, want entry %d", e.Seq, e.Data, g, next[g]+1)
		}
		next[g] = i
		bySeq[e.Seq] = e
	}
	for _, a := range acks {
		e, ok := bySeq[a.seq]
		if !ok || string(e.Data) != crashData(a.g, a.i) {
			t.Fatalf("acked entry g%d i%d seq %d lost after the crash (found %q)", a.g, a.i, a.seq, e.Data)
		}
	}
	t.Logf("%d acked, %d on disk after SIGKILL", len(acks), len(es))
}
