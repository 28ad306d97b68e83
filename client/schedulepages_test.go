package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/delayq/delayq/client"
)

// TestSchedulePages: GET /v1/schedules pages; ListSchedulesPage reads one
// page, Schedules walks them all in id order, ListSchedules returns them
// all (as it did before the list paged).
func TestSchedulePages(t *testing.T) {
	url, _ := startOperatorDaemon(t, "", true)
	c := client.New(url)
	ctx := t.Context()
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("s%d", i)
		want = append(want, id)
		if _, err := c.PutSchedule(ctx, id, client.ScheduleSpec{Cron: "@daily", Task: client.ScheduleTask{Type: "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.ListSchedulesPage(ctx, client.ScheduleListOptions{Limit: 3})
	if err != nil || len(p.Schedules) != 3 || p.Schedules[0].ID != "s0" || p.NextCursor == "" {
		t.Fatalf("first page: %+v, %v", p, err)
	}
	p, err = c.ListSchedulesPage(ctx, client.ScheduleListOptions{Limit: 3, Cursor: p.NextCursor})
	if err != nil || len(p.Schedules) != 3 || p.Schedules[0].ID != "s3" || p.NextCursor == "" {
		t.Fatalf("second page: %+v, %v", p, err)
	}
	var ids []string
	for s, err := range c.Schedules(ctx, client.ScheduleListOptions{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("walk by 2: %v, want %v", ids, want)
	}
	list, err := c.ListSchedules(ctx)
	if err != nil || len(list) != 7 || list[6].ID != "s6" {
		t.Fatalf("ListSchedules: %d, %v", len(list), err)
	}
	var ae *client.APIError
	for _, o := range []client.ScheduleListOptions{{Limit: 1001}, {Limit: -1}, {Cursor: "nonsense"}} {
		if _, err := c.ListSchedulesPage(ctx, o); !errors.As(err, &ae) || ae.Status != 422 {
			t.Errorf("ListSchedulesPage(%+v): %v, want a 422", o, err)
		}
	}
}
