package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir) // never returns: the child ends by SIGKILL
	}
	goleak.VerifyTestMain(m)
}

// openT opens a journal in dir and closes it when the test ends.
func openT(t testing.TB, dir string) *Journal {
	t.Helper()
	j, err := Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

func appendT(t testing.TB, j *Journal, entries ...Entry) []uint64 {
	t.Helper()
	seqs, err := j.Append(t.Context(), entries...)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if len(seqs) != len(entries) {
		t.Fatalf("Append returned %d seqs for %d entries", len(seqs), len(entries))
	}
	return seqs
}

func peekT(t testing.TB, j *Journal, limit int) []Entry {
	t.Helper()
	es, err := j.Peek(t.Context(), limit)
	if err != nil {
		t.Fatalf("Peek(%d): %v", limit, err)
	}
	return es
}

func removeT(t testing.TB, j *Journal, seqs ...uint64) {
	t.Helper()
	if err := j.Remove(t.Context(), seqs...); err != nil {
		t.Fatalf("Remove(%v): %v", seqs, err)
	}
}

func seqsOf(es []Entry) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

func entry(id, data string) Entry { return Entry{ID: id, Data: []byte(data)} }

func TestAppendPeekRemove(t *testing.T) {
	j := openT(t, t.TempDir())
	at := time.UnixMilli(1_700_000_000_123)
	j.now = func() time.Time { return at.Add(456 * time.Microsecond) } // sub-ms part is dropped

	if es := peekT(t, j, 10); len(es) != 0 {
		t.Fatalf("empty journal: Peek = %v", es)
	}
	s1 := appendT(t, j, entry("a", "one"))
	s2 := appendT(t, j, entry("b", "two"), entry("c", "three"), Entry{ID: "d", At: at.Add(-time.Hour)})
	if want := []uint64{1}; !slices.Equal(s1, want) {
		t.Fatalf("first seqs = %v, want %v", s1, want)
	}
	if want := []uint64{2, 3, 4}; !slices.Equal(s2, want) {
		t.Fatalf("batch seqs = %v, want %v", s2, want)
	}
	if got := j.Len(); got != 4 {
		t.Fatalf("Len = %d, want 4", got)
	}

	es := peekT(t, j, 10)
	want := []Entry{
		{Seq: 1, ID: "a", Data: []byte("one"), At: at},
		{Seq: 2, ID: "b", Data: []byte("two"), At: at},
		{Seq: 3, ID: "c", Data: []byte("three"), At: at},
		{Seq: 4, ID: "d", At: at.Add(-time.Hour)},
	}
	assertEntries(t, es, want)
	assertEntries(t, peekT(t, j, 2), want[:2])
	if es := peekT(t, j, 0); len(es) != 0 {
		t.Fatalf("Peek(0) = %v, want none", es)
	}

	removeT(t, j, 1, 3, 99) // 99 is unknown: fine
	assertEntries(t, peekT(t, j, 10), []Entry{want[1], want[3]})
	removeT(t, j, 3) // already gone: fine
	removeT(t, j)
	if got := j.Len(); got != 2 {
		t.Fatalf("Len = %d, want 2", got)
	}
	removeT(t, j, 2, 4)
	if es := peekT(t, j, 10); len(es) != 0 || j.Len() != 0 {
		t.Fatalf("after removing all: Peek = %v, Len = %d", es, j.Len())
	}
}

// TestPeekAfter pages past entries left in place, and past removed ones,
// as the replay does.
func TestPeekAfter(t *testing.T) {
	j := openT(t, t.TempDir())
	at := time.UnixMilli(1_700_000_000_000)
	j.now = func() time.Time { return at }
	var want []Entry
	for i := range 7 {
		id := fmt.Sprintf("e%d", i)
		appendT(t, j, entry(id, id))
		want = append(want, Entry{Seq: uint64(i + 1), ID: id, Data: []byte(id), At: at})
	}
	removeT(t, j, 3, 4)
	live := []Entry{want[0], want[1], want[4], want[5], want[6]}
	for _, tc := range []struct {
		after uint64
		limit int
		want  []Entry
	}{
		{0, 10, live},
		{0, 2, live[:2]},
		{2, 2, live[2:4]}, // past the removed 3 and 4
		{3, 10, live[2:]},
		{6, 10, live[4:]},
		{7, 10, nil},
		{math.MaxUint64, 10, nil},
		{1, 0, nil},
	} {
		got, err := j.PeekAfter(t.Context(), tc.after, tc.limit)
		if err != nil {
			t.Fatalf("PeekAfter(%d, %d): %v", tc.after, tc.limit, err)
		}
		assertEntries(t, got, tc.want)
	}
	// a full walk in pages of 2 sees every entry once, oldest first
	var walked []Entry
	for after := uint64(0); ; {
		page, err := j.PeekAfter(t.Context(), after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		walked = append(walked, page...)
		after = page[len(page)-1].Seq
	}
	assertEntries(t, walked, live)
}

func assertEntries(t testing.TB, got, want []Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries %v, want %d %v", len(got), seqsOf(got), len(want), seqsOf(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.ID != w.ID || !bytes.Equal(g.Data, w.Data) || !g.At.Equal(w.At) {
			t.Errorf("entry %d = {%d %q %q %v}, want {%d %q %q %v}", i, g.Seq, g.ID, g.Data, g.At, w.Seq, w.ID, w.Data, w.At)
		}
	}
}

func TestAppendRejects(t *testing.T) {
	j := openT(t, t.TempDir())
	tests := []struct {
		name    string
		ctxDone bool
		entries []Entry
		wantErr error
	}{
		{name: "empty id", entries: []Entry{entry("a", "x"), entry("", "y")}, wantErr: ErrInvalidEntry},
		{name: "id too long", entries: []Entry{entry(strings.Repeat("x", 32769), "")}, wantErr: ErrInvalidEntry},
		{name: "cancelled context", ctxDone: true, entries: []Entry{entry("a", "x")}, wantErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.ctxDone {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			_, err := j.Append(ctx, tt.entries...)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Append err = %v, want %v", err, tt.wantErr)
			}
		})
	}
	if j.Len() != 0 || len(peekT(t, j, 10)) != 0 {
		t.Fatalf("rejected Appends left entries: Len = %d", j.Len())
	}
	if seqs, err := j.Append(t.Context()); err != nil || seqs != nil {
		t.Fatalf("Append() = %v, %v; want nil, nil", seqs, err)
	}
}

func TestSeqSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	var all []uint64
	for round := range 3 {
		j, err := Open(dir)
		if err != nil {
			t.Fatalf("round %d: Open: %v", round, err)
		}
		seqs := appendT(t, j, entry("a", "1"), entry("b", "2"), entry("c", "3"))
		all = append(all, seqs...)
		removeT(t, j, seqs...) // an empty journal must still not reuse seqs
		if err := j.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
	}
	if want := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(all, want) {
		t.Fatalf("seqs over reopens = %v, want %v", all, want)
	}
}

func TestLenAfterReopen(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		appendT(t, j, entry(fmt.Sprintf("t%d", i), "x"))
	}
	removeT(t, j, 2, 5, 9)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j = openT(t, dir)
	if got := j.Len(); got != 7 {
		t.Fatalf("Len after reopen = %d, want 7", got)
	}
	if got, want := seqsOf(peekT(t, j, 100)), []uint64{1, 3, 4, 6, 7, 8, 10}; !slices.Equal(got, want) {
		t.Fatalf("Peek after reopen = %v, want %v", got, want)
	}
}

func TestLookup(t *testing.T) {
	j := openT(t, t.TempDir())
	lookup := func(id string) (Entry, bool) {
		t.Helper()
		e, ok, err := j.Lookup(t.Context(), id)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", id, err)
		}
		return e, ok
	}

	appendT(t, j, entry("a", "v1"))                   // 1
	appendT(t, j, entry("b", "b1"))                   // 2
	appendT(t, j, entry("a", "v2"))                   // 3
	appendT(t, j, entry("a", "v3"), entry("c", "c1")) // 4, 5

	if e, ok := lookup("a"); !ok || e.Seq != 4 || string(e.Data) != "v3" {
		t.Fatalf("Lookup(a) = %+v, %v; want seq 4 v3", e, ok)
	}
	if _, ok := lookup("nope"); ok {
		t.Fatal("Lookup(nope) found an entry")
	}
	if _, ok := lookup(""); ok {
		t.Fatal(`Lookup("") found an entry`)
	}

	// Replay removes oldest first: the index keeps pointing at the latest.
	removeT(t, j, 1, 3)
	if e, ok := lookup("a"); !ok || e.Seq != 4 {
		t.Fatalf("after removing older: Lookup(a) = %+v, %v; want seq 4", e, ok)
	}
	removeT(t, j, 4)
	if e, ok := lookup("a"); ok {
		t.Fatalf("after removing all of a: Lookup(a) = %+v", e)
	}
	if e, ok := lookup("b"); !ok || e.Seq != 2 {
		t.Fatalf("Lookup(b) = %+v, %v; want seq 2", e, ok)
	}
	appendT(t, j, entry("a", "v4")) // 6
	if e, ok := lookup("a"); !ok || e.Seq != 6 || string(e.Data) != "v4" {
		t.Fatalf("after re-append: Lookup(a) = %+v, %v; want seq 6 v4", e, ok)
	}
}

// TestConcurrentAppend: 64 goroutines x 50 single-entry Appends. Every entry
// is there once, seqs are unique, and each goroutine sees its seqs increase.
func TestConcurrentAppend(t *testing.T) {
	const goroutines, per = 64, 50
	j := openT(t, t.TempDir())

	seqs := make([][]uint64, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				s, err := j.Append(t.Context(), entry(fmt.Sprintf("g%d", g), fmt.Sprintf("g%d-%d", g, i)))
				if err != nil {
					errs[g] = err
					return
				}
				seqs[g] = append(seqs[g], s[0])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Append: %v", err)
	}

	want := make(map[uint64]string, goroutines*per)
	for g, ss := range seqs {
		if !slices.IsSorted(ss) {
			t.Errorf("goroutine %d: seqs not increasing: %v", g, ss)
		}
		for i, s := range ss {
			if prev, dup := want[s]; dup {
				t.Fatalf("seq %d given to %s and g%d-%d", s, prev, g, i)
			}
			want[s] = fmt.Sprintf("g%d-%d", g, i)
		}
	}
	if j.Len() != goroutines*per {
		t.Fatalf("Len = %d, want %d", j.Len(), goroutines*per)
	}
	es := peekT(t, j, 2*goroutines*per)
	if len(es) != goroutines*per {
		t.Fatalf("Peek returned %d entries, want %d", len(es), goroutines*per)
	}
	for i, e := range es {
		if i > 0 && e.Seq <= es[i-1].Seq {
			t.Fatalf("Peek out of order at %d: %d after %d", i, e.Seq, es[i-1].Seq)
		}
		if string(e.Data) != want[e.Seq] {
			t.Fatalf("seq %d holds %q, want %q", e.Seq, e.Data, want[e.Seq])
		}
	}
	for g := range goroutines {
		e, ok, err := j.Lookup(t.Context(), fmt.Sprintf("g%d", g))
		if err != nil || !ok || e.Seq != seqs[g][per-1] {
			t.Fatalf("Lookup(g%d) = %d, %v, %v; want seq %d", g, e.Seq, ok, err, seqs[g][per-1])
		}
	}
}

// TestConcurrentAppendRemove runs a replay loop (Peek, Remove) against
// concurrent appenders: nothing is lost or seen twice, and Len ends at zero.
func TestConcurrentAppendRemove(t *testing.T) {
	const goroutines, per = 8, 100
	j := openT(t, t.TempDir())

	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				if _, err := j.Append(t.Context(), entry(fmt.Sprintf("g%d-%d", g, i), "x")); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		})
	}
	seen := make(map[uint64]bool)
	var last uint64
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < goroutines*per {
		if time.Now().After(deadline) {
			t.Fatalf("replayed %d of %d entries before the deadline", len(seen), goroutines*per)
		}
		if j.Len() < 0 {
			t.Fatalf("Len = %d", j.Len())
		}
		es := peekT(t, j, 16)
		for _, e := range es {
			if seen[e.Seq] || e.Seq <= last {
				t.Fatalf("seq %d replayed out of order or twice (last %d)", e.Seq, last)
			}
			seen[e.Seq], last = true, e.Seq
		}
		removeT(t, j, seqsOf(es)...)
		if len(es) == 0 {
			time.Sleep(time.Millisecond) // idle poll, as the replay loop does
		}
	}
	wg.Wait()
	if j.Len() != 0 {
		t.Fatalf("Len = %d after replaying everything", j.Len())
	}
}

func TestOpenLocked(t *testing.T) {
	dir := t.TempDir()
	openT(t, dir)
	start := time.Now()
	j2, err := Open(dir)
	if err == nil {
		_ = j2.Close()
		t.Fatal("second Open of the same dir succeeded")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "journal "+dir+" is locked by another process") {
		t.Fatalf("second Open: %v; want the locked error", err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond || waited > 10*time.Second {
		t.Errorf("second Open gave up after %v, want about %v", waited, lockTimeout)
	}
}

func TestOpenCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "journal")
	openT(t, dir)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("journal dir mode = %v, want no group/other access", perm)
	}
	if _, err := os.Stat(filepath.Join(dir, fileName)); err != nil {
		t.Fatalf("journal file: %v", err)
	}
}

// TestOpenCorruptRecord flips one byte of a record's data in the file: Open
// must fail naming that seq, not drop the entry.
func TestOpenCorruptRecord(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	appendT(t, j, entry("a", "fine-1"), entry("b", "MARKER-damaged-record"), entry("c", "fine-3"))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(dir, fileName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	marker := []byte("MARKER-damaged-record")
	n := 0
	for i := bytes.Index(raw, marker); i >= 0; {
		raw[i+len("MARKER-")] ^= 0x20 // 'd' -> 'D'
		n++
		next := bytes.Index(raw[i+1:], marker)
		if next < 0 {
			break
		}
		i += 1 + next
	}
	if n == 0 {
		t.Fatal("record data not found in the file")
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	j, err = Open(dir)
	if err == nil {
		_ = j.Close()
		t.Fatal("Open of a journal with a corrupt record succeeded")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "seq 2") {
		t.Fatalf("Open: %v; want ErrCorrupt naming seq 2", err)
	}
	t.Logf("Open: %v", err)
}

// TestOpenCorruptFile: a journal.db that is not a bbolt file is a clear
// error, and Open does not overwrite it.
func TestOpenCorruptFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, fileName)
	garbage := bytes.Repeat([]byte("not a bbolt file "), 1024)
	if err := os.WriteFile(path, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := Open(dir)
	if err == nil {
		_ = j.Close()
		t.Fatal("Open of a garbage file succeeded")
	}
	if !strings.Contains(err.Error(), "open journal "+path) {
		t.Fatalf("Open: %v; want it to name %s", err, path)
	}
	t.Logf("Open: %v", err)
	if raw, _ := os.ReadFile(path); !bytes.Equal(raw, garbage) {
		t.Fatal("Open modified the corrupt file")
	}
}

// Rewrite replaces an entry's data in place: same seq, id and time, still
// found by Lookup; an entry no longer there is skipped.
func TestRewrite(t *testing.T) {
	j := openT(t, t.TempDir())
	seqs, err := j.Append(t.Context(), Entry{ID: "a", Data: []byte("v1")}, Entry{ID: "b", Data: []byte("v1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Remove(t.Context(), seqs[1]); err != nil {
		t.Fatal(err)
	}
	if err := j.Rewrite(t.Context(), Entry{Seq: seqs[0], Data: []byte("v2")}, Entry{Seq: seqs[1], Data: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	e, ok, err := j.Lookup(t.Context(), "a")
	if err != nil || !ok || e.Seq != seqs[0] || string(e.Data) != "v2" {
		t.Fatalf("a after rewrite: %+v %v %v", e, ok, err)
	}
	if _, ok, _ := j.Lookup(t.Context(), "b"); ok || j.Len() != 1 {
		t.Fatalf("a removed entry came back (len %d)", j.Len())
	}
}

// ID names the journal among every daemon's: made with its file, kept
// across restarts (a replay token is the ID and an entry's seq).
func TestIDSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	id := j.ID()
	if len(id) != 16 {
		t.Fatalf("id %q, want 16 hex digits", id)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if j.ID() != id {
		t.Fatalf("id %q after a reopen, want %q", j.ID(), id)
	}
	other, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.ID() == id {
		t.Fatalf("two journals share the id %q", id)
	}
}
