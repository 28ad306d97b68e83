package tbenv

import (
	"io"
	"os"
	"slices"
	"testing"
)

func TestCloseRunsChildrenThenOwnCleanupsInReverse(t *testing.T) {
	root := New("root", io.Discard)
	var got []string
	root.Cleanup(func() { got = append(got, "root1") })
	sub := root.Sub("sub")
	sub.Cleanup(func() { got = append(got, "sub1") })
	sub.Cleanup(func() { got = append(got, "sub2") })
	dir := sub.TempDir()
	root.Cleanup(func() { got = append(got, "root2") })
	sub.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("temp dir %s survived Close: %v", dir, err)
	}
	if sub.Context().Err() == nil {
		t.Fatal("scope context not cancelled")
	}
	root.Close()
	root.Close() // no-op
	want := []string{"sub2", "sub1", "root2", "root1"}
	if !slices.Equal(got, want) {
		t.Fatalf("cleanup order %v, want %v", got, want)
	}
}

func TestFatalRunsEveryCleanupAndExits(t *testing.T) {
	root := New("root", io.Discard)
	var code = -1
	root.root.exit = func(c int) { code = c }
	var ran []string
	root.Cleanup(func() { ran = append(ran, "root") })
	sub := root.Sub("sub")
	sub.Cleanup(func() { ran = append(ran, "sub") })
	sub.Fatalf("boom %d", 1)
	if code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if !slices.Equal(ran, []string{"sub", "root"}) {
		t.Fatalf("cleanups run: %v", ran)
	}
	if !root.Failed() || !sub.Failed() {
		t.Fatal("failure not recorded")
	}
}
