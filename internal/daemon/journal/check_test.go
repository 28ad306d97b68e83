package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/delayq/delayq/internal/testenv/tmpfs"
)

// TestCheck: Check succeeds on an open journal without changing what it
// holds (entries, seqs, Len, after a reopen too), and fails once the
// journal cannot take writes (here: closed), as Append does.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	appendT(t, j, Entry{ID: "a", Data: []byte("1")})
	for range 3 {
		if err := j.Check(t.Context()); err != nil {
			t.Fatalf("check on an open journal: %v", err)
		}
	}
	if got, err := j.Peek(t.Context(), 10); err != nil || len(got) != 1 || got[0].ID != "a" || j.Len() != 1 {
		t.Fatalf("after check: %+v %v len %d", got, err, j.Len())
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Check(t.Context()); err == nil {
		t.Fatal("check on a closed journal succeeded")
	}
	if _, err := j.Append(t.Context(), Entry{ID: "b"}); err == nil {
		t.Fatal("append on a closed journal succeeded")
	}
	j = openT(t, dir)
	if j.Len() != 1 {
		t.Fatalf("reopened: len %d, want 1", j.Len())
	}
	seqs := appendT(t, j, Entry{ID: "c"})
	if seqs[0] != 2 {
		t.Fatalf("seq after check and reopen: %d, want 2", seqs[0])
	}
}

// fakeProbe is a probe file whose writes fail with err (nil: they pass);
// it counts the probes.
type fakeProbe struct {
	mu     sync.Mutex
	err    error
	opened int
	open   int // opened and not closed yet
}

func (f *fakeProbe) openFile(string) (probeFile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened++
	f.open++
	return fakeFile{f}, nil
}

func (f *fakeProbe) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeProbe) counts() (opened, open int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened, f.open
}

type fakeFile struct{ f *fakeProbe }

func (w fakeFile) Write(b []byte) (int, error) {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	if w.f.err != nil {
		return 0, &os.PathError{Op: "write", Path: probeName, Err: w.f.err}
	}
	return len(b), nil
}
func (w fakeFile) Sync() error          { return nil }
func (w fakeFile) Truncate(int64) error { return nil }
func (w fakeFile) Close() error {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	w.f.open--
	return nil
}

// clockT is a settable clock for Journal.now.
type clockT struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clockT) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clockT) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestCheckNoSpace: Check fails, naming ENOSPC, when the file system
// refuses new data, although bbolt still commits its one-key write (what
// a full disk does: see check.go); it probes at most once per checkEvery
// and passes again once there is room.
func TestCheckNoSpace(t *testing.T) {
	j := openT(t, t.TempDir())
	clock := &clockT{t: time.UnixMilli(1_700_000_000_000)}
	j.now = clock.now
	fp := &fakeProbe{}
	j.openProbe = fp.openFile

	if err := j.Check(t.Context()); err != nil {
		t.Fatalf("check with room: %v", err)
	}
	fp.set(syscall.ENOSPC)
	clock.add(checkEvery)
	for i := range 5 {
		err := j.Check(t.Context())
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no room") {
			t.Fatalf("check %d on a full disk: %v", i, err)
		}
		clock.add(checkEvery / 10)
	}
	if opened, open := fp.counts(); opened != 2 || open != 0 {
		t.Fatalf("probes: %d opened (want 2: one per checkEvery), %d left open", opened, open)
	}
	// The journal itself still commits small writes meanwhile.
	appendT(t, j, Entry{ID: "a", Data: []byte("1")})
	fp.set(nil)
	if err := j.Check(t.Context()); err == nil {
		t.Fatal("the failed probe's answer was not kept for checkEvery")
	}
	clock.add(checkEvery)
	if err := j.Check(t.Context()); err != nil {
		t.Fatalf("check once there is room again: %v", err)
	}
}

// TestCheckAfterFailedWrite: a journal write that fails makes Check fail
// at once with its error, although the last probe passed a moment ago
// (its answer cached); the next probe, checkEvery later, decides again.
func TestCheckAfterFailedWrite(t *testing.T) {
	j := openT(t, t.TempDir())
	clock := &clockT{t: time.UnixMilli(1_700_000_000_000)}
	j.now = clock.now
	if err := j.Check(t.Context()); err != nil {
		t.Fatalf("check: %v", err)
	}
	// bbolt refuses to grow the file past MaxSize: an Append that needs
	// more room fails, as on a disk that is full.
	fi, err := os.Stat(filepath.Join(j.dir, fileName))
	if err != nil {
		t.Fatal(err)
	}
	j.db.MaxSize = int(fi.Size())
	_, err = j.Append(t.Context(), Entry{ID: "big", Data: bytes.Repeat([]byte("x"), 4<<20)})
	if !errors.Is(err, bolterrors.ErrMaxSizeReached) {
		t.Fatalf("append past MaxSize: %v", err)
	}
	clock.add(time.Millisecond)
	err = j.Check(t.Context())
	if !errors.Is(err, bolterrors.ErrMaxSizeReached) || !strings.Contains(err.Error(), "a write failed") {
		t.Fatalf("check right after a failed append: %v", err)
	}
	clock.add(checkEvery)
	if err := j.Check(t.Context()); err != nil {
		t.Fatalf("check a probe later: %v", err)
	}
	if j.Len() != 0 {
		t.Fatalf("len %d after the failed append", j.Len())
	}
}

// TestCheckFullDisk: on a real file system that is full (a 1 MiB tmpfs)
// Check fails with ENOSPC and says so, while bbolt still commits small
// writes into pages it wrote before (the check before this one did that
// and passed); once there is room again it passes.
func TestCheckFullDisk(t *testing.T) {
	mnt := tmpfs.Mount(t, 1<<20)
	j := openT(t, filepath.Join(mnt, "journal"))
	clock := &clockT{t: time.UnixMilli(1_700_000_000_000)}
	j.now = clock.now
	if err := j.Check(t.Context()); err != nil {
		t.Fatalf("check with room: %v", err)
	}
	// Fill the file system: a file of 512 KiB (removed later to make
	// room), journal entries until one is refused, then a file with
	// whatever is left.
	reserve := filepath.Join(mnt, "reserve")
	if err := os.WriteFile(reserve, make([]byte, 512<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("x"), 300)
	var err error
	for i := 0; err == nil; i++ {
		if i == 100000 {
			t.Fatal("1 MiB took 100,000 appends")
		}
		_, err = j.Append(t.Context(), Entry{ID: fmt.Sprintf("t-%d", i), Data: data})
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append on a full tmpfs: %v", err)
	}
	f, err := os.Create(filepath.Join(mnt, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = f.Write(make([]byte, 512))
	}
	_ = f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	// bbolt itself still commits a small write (a free page it wrote
	// before), which is why a small write proves nothing.
	if _, err := j.Append(t.Context(), Entry{ID: "tiny"}); err != nil {
		t.Logf("(a tiny append was refused too: %v)", err)
	}
	for range 3 {
		clock.add(checkEvery)
		err := j.Check(t.Context())
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no room") {
			t.Fatalf("check on a full disk: %v", err)
		}
	}
	if err := os.Remove(reserve); err != nil {
		t.Fatal(err)
	}
	clock.add(checkEvery)
	if err := j.Check(t.Context()); err != nil {
		t.Fatalf("check once there is room again: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(j.dir, probeName)); err != nil || fi.Size() != 0 {
		t.Fatalf("probe file after the check: %v, %v (want it empty)", fi, err)
	}
}
