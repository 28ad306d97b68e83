package journal

import (
	"testing"
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
