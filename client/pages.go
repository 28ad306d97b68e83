package client

import (
	"fmt"
	"iter"
)

// walkPages is the one walk of a paged listing (Tasks, Schedules,
// Search): page reads the page at a cursor and answers its items and the
// next cursor ("" when the walk is complete). It starts at cursor, stops
// at the first error, which it yields, and refuses a daemon that answers
// the cursor it was sent (a loop); what names the listing in that error.
func walkPages[T any](what, cursor string, page func(cursor string) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		for {
			items, next, err := page(cursor)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			if next == cursor {
				yield(zero, fmt.Errorf("delayq: %s: the daemon answered the cursor it was sent (%.40q)", what, cursor))
				return
			}
			cursor = next
		}
	}
}
