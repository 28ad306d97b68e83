package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// TestSchedulesCommand: dq schedules set (flags and --file), get, list,
// pause, resume and delete against a real daemon and etcd, in text and
// JSON; bad input names the field; argument errors come before any
// request; a daemon without etcd answers 503 naming the setting.
// tickLine is one tick of dq schedules get: its time and distance.
var tickLine = regexp.MustCompile(`(?m)\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \((in [^)]+|now|[^)]+ ago)\)$`)

func TestSchedulesCommand(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	base, _ := startDaemon(t, etcd.Endpoints)
	env := map[string]string{"DQ_ADDR": base}
	c := client.New(base)

	out, _, err := runDQ(t, env, "schedules", "set", "report", "--cron", "0 30 9 * * MON-FRI", "--timezone", "Europe/Berlin",
		"--type", "report.daily", "--payload", `{"to":"ops"}`, "--header", "team=a", "--max-attempts", "3", "--timeout", "30s",
		"--catchup", "none", "--end-at", "2099-01-01T00:00:00Z")
	if err != nil || !regexp.MustCompile(`^report created: next tick \d{4}-\d\d-\d\dT09:30:00\+0[12]:00 \((in .+|now)\)\n$`).MatchString(out) {
		t.Fatalf("dq schedules set: %q, %v", out, err)
	}
	s, err := c.GetSchedule(t.Context(), "report")
	if err != nil || s.Task.Type != "report.daily" || string(s.Task.Payload) != `{"to":"ops"}` || s.Task.Headers["team"] != "a" ||
		s.Task.MaxAttempts != 3 || s.Task.Timeout != 30*time.Second || s.Catchup != "none" || s.EndAt.Year() != 2099 || s.Timezone != "Europe/Berlin" {
		t.Fatalf("stored: %+v, %v", s, err)
	}

	// --file replaces the whole spec; - reads stdin.
	spec := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(spec, []byte(`{"cron":"@every 1m","task":{"type":"tick","payload_base64":"AAE="},"paused":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err = runDQ(t, env, "schedules", "set", "report", "--file", spec)
	if err != nil || !strings.HasPrefix(out, "report replaced: paused; it would tick next ") {
		t.Fatalf("dq schedules set --file: %q, %v", out, err)
	}
	if s, _ := c.GetSchedule(t.Context(), "report"); s.Cron != "@every 1m" || !s.Paused || s.Timezone != "UTC" || s.Task.MaxAttempts != 0 || len(s.Task.PayloadBytes) != 2 {
		t.Fatalf("after --file: %+v", s)
	}
	out, _, err = runDQ(t, env, "schedules", "set", "b.second", "--cron", "@daily", "--type", "x", "-o", "json")
	var view map[string]any
	if err != nil || json.Unmarshal([]byte(out), &view) != nil || view["id"] != "b.second" || view["created"] != true || len(view["next"].([]any)) != 5 {
		t.Fatalf("dq schedules set -o json: %q, %v", out, err)
	}

	// get: every field on its line, five ticks (each with its distance
	// from now: the first tick of "@every 1m" is the next whole minute,
	// "now" within half a second of it, when the rounded distance is 0).
	out, _, err = runDQ(t, env, "schedules", "get", "report")
	if err != nil || !strings.Contains(out, "cron:       @every 1m\n") || !strings.Contains(out, "state:      paused\n") ||
		!strings.Contains(out, "task:       type tick, payload 2 bytes\n") || !strings.Contains(out, "last tick:  -\n") ||
		len(tickLine.FindAllString(out, -1)) != 5 {
		t.Fatalf("dq schedules get:\n%s%v", out, err)
	}
	out, _, err = runDQ(t, env, "schedules", "get", "report", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &view) != nil || view["paused"] != true || view["last_tick"] != nil {
		t.Fatalf("dq schedules get -o json: %q, %v", out, err)
	}

	// list: a table sorted by id.
	out, _, err = runDQ(t, env, "schedules")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("dq schedules: %q, %v", out, err)
	}
	if f := strings.Fields(lines[1]); f[0] != "b.second" || f[1] != "@daily" || f[2] != "UTC" || f[3] != "x" || f[4] != "running" || f[6] != "-" {
		t.Errorf("row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "report" || f[1] != "@every" || f[2] != "1m" || f[5] != "paused" {
		t.Errorf("row %q", lines[2])
	}
	var doc struct {
		Schedules []client.Schedule `json:"schedules"`
	}
	out, _, err = runDQ(t, env, "schedules", "list", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Schedules) != 2 {
		t.Fatalf("dq schedules list -o json: %q, %v", out, err)
	}

	// pause and resume: idempotent.
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"pause", "report"}, "report was already paused\n"},
		{[]string{"resume", "report"}, "report resumed: next tick "},
		{[]string{"resume", "report"}, "report was not paused; next tick "},
		{[]string{"pause", "report"}, "report paused: no ticks until dq schedules resume report\n"},
	} {
		out, _, err := runDQ(t, env, append([]string{"schedules"}, tc.args...)...)
		if err != nil || !strings.HasPrefix(out, tc.out) {
			t.Errorf("dq schedules %q: %q, %v; want %q", tc.args, out, err, tc.out)
		}
	}
	out, _, err = runDQ(t, env, "schedules", "resume", "report", "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &view) != nil || view["paused"] != false || view["changed"] != true {
		t.Fatalf("dq schedules resume -o json: %q, %v", out, err)
	}

	// Bad input is the daemon's 4xx naming the field; nothing changes.
	var ae *client.APIError
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"--cron", "99 * * * *", "--type", "x"}, "cron:"},
		{[]string{"--cron", "@daily", "--type", "x", "--timezone", "Atlantis/Capital"}, "timezone:"},
		{[]string{"--cron", "@daily", "--type", "x", "--catchup", "maybe"}, "catchup:"},
		{[]string{"--cron", "@daily", "--type", "x", "--start-at", "2030-01-02T00:00:00Z", "--end-at", "2030-01-01T00:00:00Z"}, "end_at:"},
		{[]string{"--cron", "@daily", "--type", "bad type"}, "task.type:"},
	} {
		_, _, err := runDQ(t, env, append([]string{"schedules", "set", "report"}, tc.args...)...)
		if !errors.As(err, &ae) || ae.Status != 422 || !strings.HasPrefix(ae.Message, tc.field) {
			t.Errorf("dq schedules set %q: %v, want 422 %s", tc.args, err, tc.field)
		}
	}
	if err := os.WriteFile(spec, []byte(`{"cron":"@daily","task":{"type":"x"},"every":"1h"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runDQ(t, env, "schedules", "set", "report", "--file", spec); !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, "every") {
		t.Errorf("unknown field in --file: %v", err)
	}
	if s, _ := c.GetSchedule(t.Context(), "report"); s.Cron != "@every 1m" {
		t.Fatalf("bad input changed the schedule: %+v", s)
	}

	for _, bad := range [][]string{
		{"get"}, {"get", "a", "b"}, {"pause"}, {"stop", "x"}, {"list", "x"}, {"-o", "yaml"},
		{"set", "x"}, {"set", "x", "--cron", "@daily"}, {"set", "--cron", "@daily", "--type", "x"},
		{"set", "x", "--file", spec, "--cron", "@daily"}, {"set", "x", "--cron", "@daily", "--type", "x", "--payload", "{"},
		{"set", "x", "--cron", "@daily", "--type", "x", "--timeout", "soon"}, {"set", "x", "--cron", "@daily", "--type", "x", "--start-at", "tomorrow"},
	} {
		if _, _, err := runDQ(t, env, append([]string{"schedules"}, bad...)...); err == nil || errors.As(err, new(*client.APIError)) {
			t.Errorf("dq schedules %q: %v, want an error before any request", bad, err)
		}
	}

	// delete, then not found.
	if out, _, err := runDQ(t, env, "schedules", "delete", "report"); err != nil || !strings.HasPrefix(out, "report deleted") {
		t.Fatalf("dq schedules delete: %q, %v", out, err)
	}
	for _, sub := range []string{"get", "delete", "pause"} {
		if _, _, err := runDQ(t, env, "schedules", sub, "report"); !errors.As(err, &ae) || ae.Status != 404 {
			t.Errorf("dq schedules %s of a deleted schedule: %v", sub, err)
		}
	}
	if out, _, err := runDQ(t, env, "schedules", "delete", "b.second", "-o", "json"); err != nil || !strings.Contains(out, `"deleted": true`) {
		t.Fatalf("dq schedules delete -o json: %q, %v", out, err)
	}
	if out, _, err := runDQ(t, env, "schedules"); err != nil || !strings.HasPrefix(out, "no schedules") {
		t.Fatalf("dq schedules with none: %q, %v", out, err)
	}

	noEtcd, _ := startDaemon(t, nil)
	if _, _, err := runDQ(t, nil, "schedules", "--addr", noEtcd); !errors.As(err, &ae) || ae.Status != 503 || !strings.Contains(ae.Message, "DQ_ETCD_ENDPOINTS") {
		t.Errorf("list without etcd: %v", err)
	}
}
