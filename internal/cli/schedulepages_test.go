package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// TestSchedulesListWalksPages: dq schedules list shows every schedule
// across the pages of GET /v1/schedules, as a table and as JSON.
func TestSchedulesListWalksPages(t *testing.T) {
	defer func(n int) { schedulesPage = n }(schedulesPage)
	schedulesPage = 2
	etcd := testenv.StartEtcd(t)
	base, _ := startDaemon(t, etcd.Endpoints)
	env := map[string]string{"DQ_ADDR": base}
	c := client.New(base)
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("s%d", i)
		want = append(want, id)
		if _, err := c.PutSchedule(t.Context(), id, client.ScheduleSpec{Cron: "@daily", Task: client.ScheduleTask{Type: "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := runDQ(t, env, "schedules", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 6 {
		t.Fatalf("dq schedules list: %q, %v", out, err)
	}
	for i, id := range want {
		if f := strings.Fields(lines[i+1]); f[0] != id {
			t.Errorf("row %d: %q, want %s", i, lines[i+1], id)
		}
	}
	var doc struct {
		Schedules []client.Schedule `json:"schedules"`
	}
	out, _, err = runDQ(t, env, "schedules", "list", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Schedules) != 5 || doc.Schedules[4].ID != "s4" {
		t.Fatalf("dq schedules list -o json: %q, %v", out, err)
	}
}
