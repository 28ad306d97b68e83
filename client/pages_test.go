package client

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestWalkPages: every page's items in order from the starting cursor, a
// stop when the caller stops, the page's error yielded, and a daemon that
// answers the cursor it was sent refused instead of looped on.
func TestWalkPages(t *testing.T) {
	pages := map[string]struct {
		items []int
		next  string
	}{"": {[]int{1, 2}, "a"}, "a": {[]int{3}, "b"}, "b": {[]int{4}, ""}, "loop": {[]int{9}, "loop"}}
	read := func(cursor string) ([]int, string, error) {
		if cursor == "bad" {
			return nil, "", errors.New("boom")
		}
		p := pages[cursor]
		return p.items, p.next, nil
	}
	collect := func(start string, most int) ([]int, error) {
		var got []int
		for v, err := range walkPages("test", start, read) {
			if err != nil {
				return got, err
			}
			if got = append(got, v); len(got) == most {
				break
			}
		}
		return got, nil
	}
	if got, err := collect("", 0); err != nil || !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Errorf("whole walk: %v %v", got, err)
	}
	if got, err := collect("a", 0); err != nil || !slices.Equal(got, []int{3, 4}) {
		t.Errorf("from a cursor: %v %v", got, err)
	}
	if got, err := collect("", 3); err != nil || !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("stopped by the caller: %v %v", got, err)
	}
	if _, err := collect("bad", 0); err == nil || err.Error() != "boom" {
		t.Errorf("a page's error: %v", err)
	}
	if got, err := collect("loop", 0); err == nil || !strings.Contains(err.Error(), "delayq: test: the daemon answered the cursor it was sent") || !slices.Equal(got, []int{9}) {
		t.Errorf("a looping cursor: %v %v", got, err)
	}
}
