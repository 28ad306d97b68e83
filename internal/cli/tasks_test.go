package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/testenv"
)

// scheduleTasks schedules n tasks of typ with ids prefix-0.. due from due
// on, one millisecond apart.
func scheduleTasks(t *testing.T, base, prefix, typ string, n int, due time.Time) {
	t.Helper()
	batch := make([]client.Task, n)
	for i := range batch {
		batch[i] = client.Task{ID: fmt.Sprintf("%s-%d", prefix, i), Type: typ, DueAt: due.Add(time.Duration(i) * time.Millisecond)}
	}
	res, err := client.New(base).ScheduleBatch(t.Context(), batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("schedule %s: %v", r.ID, r.Err)
		}
	}
}

// killTasks makes tasks that are due now dead, as an event process and a
// worker would: a take claims every due task of a shard, so the ids are
// gathered shard by shard, then finished as dead.
func killTasks(t *testing.T, r *testenv.Redis, ns string, ids ...string) {
	t.Helper()
	ctx := t.Context()
	st, err := redisstore.New(ctx, r.Client(t), redisstore.Options{Namespace: ns, Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	gens := map[string]uint64{}
	testenv.WaitFor(t, 5*time.Second, fmt.Sprintf("%v taken", ids), func() bool {
		for _, id := range ids {
			if _, ok := gens[id]; ok {
				continue
			}
			tk, err := st.Take(ctx, st.Shard(id), 1, 1000, time.Minute)
			if err != nil {
				return false
			}
			for _, x := range tk.Tasks {
				if slices.Contains(ids, x.ID) {
					gens[x.ID] = x.Gen
				}
			}
		}
		return len(gens) == len(ids)
	})
	for id, gen := range gens {
		if _, err := st.Finish(ctx, redisstore.Finish{ID: id, Gen: gen, Kind: redisstore.Dead, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
	}
}

var tableRow = regexp.MustCompile(`(?m)^(\S+)\s+(\S+)\s+(scheduled|retrying|fired|paused|dead|succeeded|cancelled|delivered)\s+(\S+)\s+(\d+)/(\d+)\s+(\d+)$`)

// tableIDs is the ids of the rows of dq tasks list's table.
func tableIDs(t *testing.T, out string) []string {
	t.Helper()
	var ids []string
	for _, m := range tableRow.FindAllStringSubmatch(out, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestTasksList: dq tasks list as a table and as JSON, one page or --all,
// the next page's cursor on stderr, filters, and bad flags refused naming
// the flag before any request.
func TestTasksList(t *testing.T) {
	base, _ := startDaemon(t, nil)
	env := map[string]string{"DQ_ADDR": base}
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	scheduleTasks(t, base, "a", "alpha", 30, due)
	scheduleTasks(t, base, "b", "beta", 5, due.Add(time.Minute))

	out, stderr, err := runDQ(t, env, "tasks", "list", "--all", "--limit", "4")
	ids := tableIDs(t, out)
	if err != nil || len(ids) != 35 || stderr != "" || !strings.HasPrefix(out, "ID ") || !strings.Contains(out, "DUE AT") || !strings.Contains(out, "SHARD") {
		t.Fatalf("tasks list --all: %d rows, %q, %q, %v", len(ids), out, stderr, err)
	}
	if strings.Count(out, "ID ") != 1 {
		t.Errorf("the header is printed more than once: %q", out)
	}
	slices.Sort(ids)
	if len(slices.Compact(ids)) != 35 {
		t.Errorf("a task listed twice: %v", ids)
	}
	if m := tableRow.FindStringSubmatch(out); (m[2] != "alpha" && m[2] != "beta") || m[3] != "scheduled" || m[5] != "1" || m[6] != "10" {
		t.Errorf("row %q", m[0])
	}
	if !strings.Contains(out, due.UTC().Format("2006-01-02T15:04:05.000Z")) {
		t.Errorf("no row due at %v: %q", due, out)
	}

	// One page, the cursor of the next on stderr, then that page.
	out, stderr, err = runDQ(t, env, "tasks", "list", "--limit", "3", "--type", "alpha")
	m := regexp.MustCompile(`--cursor (\S+)`).FindStringSubmatch(stderr)
	if err != nil || len(tableIDs(t, out)) > 3 || m == nil || !strings.Contains(stderr, "--all") {
		t.Fatalf("one page: %q, %q, %v", out, stderr, err)
	}
	first := tableIDs(t, out)
	out, _, err = runDQ(t, env, "tasks", "list", "--limit", "3", "--type", "alpha", "--cursor", m[1])
	if next := tableIDs(t, out); err != nil || len(next) == 0 || slices.ContainsFunc(next, func(id string) bool { return slices.Contains(first, id) }) {
		t.Fatalf("next page: %v after %v, %v", next, first, err)
	}

	// JSON: one array of the tasks as the daemon answers them.
	out, stderr, err = runDQ(t, env, "tasks", "list", "--type", "beta", "--all", "--limit", "2", "-o", "json")
	var tasks []client.ListedTask
	if err != nil || json.Unmarshal([]byte(out), &tasks) != nil || len(tasks) != 5 || stderr != "" {
		t.Fatalf("-o json: %q, %q, %v", out, stderr, err)
	}
	for _, tk := range tasks {
		if tk.Type != "beta" || tk.State != "scheduled" || !strings.HasPrefix(tk.ID, "b-") {
			t.Errorf("json task %+v", tk)
		}
	}
	if out, _, err = runDQ(t, env, "tasks", "list", "--state", "dead", "-o", "json"); err != nil || out != "[]\n" {
		t.Errorf("no dead tasks as JSON: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "tasks", "list", "--state", "dead"); err != nil || out != "no tasks\n" {
		t.Errorf("no dead tasks: %q, %v", out, err)
	}
	// Time filters: RFC 3339, or a duration from now; -o table is the text.
	out, _, err = runDQ(t, env, "tasks", "list", "--due-before", due.Add(10*time.Millisecond).Format(time.RFC3339Nano), "-o", "table")
	if ids := tableIDs(t, out); err != nil || len(ids) != 10 {
		t.Errorf("--due-before +10ms: %v, %v", ids, err)
	}
	if out, _, err = runDQ(t, env, "tasks", "list", "--due-after", "30m", "--due-before", "2h", "--all"); err != nil || len(tableIDs(t, out)) != 35 {
		t.Errorf("--due-after 30m --due-before 2h: %q, %v", out, err)
	}
	if out, _, err = runDQ(t, env, "tasks", "list", "--due-before", "-1m"); err != nil || out != "no tasks\n" {
		t.Errorf("--due-before -1m: %q, %v", out, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "nope"}, "--state"},
		{[]string{"--limit", "0"}, "--limit"},
		{[]string{"--limit", "1001"}, "--limit"},
		{[]string{"--due-before", "tomorrow"}, "due-before"},
		{[]string{"--due-after", "2h", "--due-before", "1h"}, "--due-after"},
		{[]string{"-o", "yaml"}, "-o"},
		{[]string{"extra"}, "extra"},
		{[]string{"--limit", "x"}, "limit"},
	} {
		_, _, err := runDQ(t, env, append([]string{"tasks", "list"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, new(*client.APIError)) {
			t.Errorf("dq tasks list %q: %v, want an error naming %s before any request", tc.args, err, tc.want)
		}
	}
	// The daemon's refusal of a bad type or cursor comes through.
	var ae *client.APIError
	if _, _, err := runDQ(t, env, "tasks", "list", "--cursor", "garbage"); !errors.As(err, &ae) || !strings.Contains(ae.Message, "cursor") {
		t.Errorf("bad cursor: %v", err)
	}
	if _, _, err := runDQ(t, env, "tasks", "list", "--type", "a b", "-o", "json"); !errors.As(err, &ae) || !strings.Contains(ae.Message, "type") {
		t.Errorf("bad type: %v", err)
	}
}

// TestTasksCancelAndDeadBulk: dq tasks cancel by ids, filter and --all;
// dq dead redrive and delete by ids, --type and --all; each prints how
// many it changed, and a repeat changes nothing.
func TestTasksCancelAndDeadBulk(t *testing.T) {
	base, r, ns := startDaemonNS(t, nil)
	env := map[string]string{"DQ_ADDR": base}
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	scheduleTasks(t, base, "a", "alpha", 10, due)
	scheduleTasks(t, base, "b", "beta", 5, due)

	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"a-0", "a-1", "nope"}, "cancelled 2 tasks\n"},
		{[]string{"a-0"}, "cancelled 0 tasks\n"},
		{[]string{"--type", "beta"}, "cancelled 5 tasks\n"},
		{[]string{"--type", "alpha", "--due-before", due.Add(3 * time.Millisecond).Format(time.RFC3339Nano)}, "cancelled 1 task\n"},
		{[]string{"--due-after", "30m", "--type", "alpha", "-o", "json"}, "{\n  \"changed\": 7\n}\n"},
		{[]string{"--all"}, "cancelled 0 tasks\n"},
	} {
		out, _, err := runDQ(t, env, append([]string{"tasks", "cancel"}, tc.args...)...)
		if err != nil || out != tc.out {
			t.Errorf("dq tasks cancel %q: %q, %v; want %q", tc.args, out, err, tc.out)
		}
	}
	for _, bad := range [][]string{
		{},
		{"a-1", "--type", "alpha"},
		{"a-1", "--all"},
		{"--type", "alpha", "--all"},
		{"--due-before", "soon"},
		{"--due-after", "1h", "--due-before", "1h"},
	} {
		if _, _, err := runDQ(t, env, append([]string{"tasks", "cancel"}, bad...)...); err == nil || errors.As(err, new(*client.APIError)) {
			t.Errorf("dq tasks cancel %q: %v, want an error before any request", bad, err)
		}
	}

	scheduleTasks(t, base, "d", "dt", 3, time.Now())
	scheduleTasks(t, base, "e", "et", 2, time.Now())
	killTasks(t, r, ns, "d-0", "d-1", "d-2", "e-0", "e-1")
	out, _, err := runDQ(t, env, "tasks", "list", "--state", "dead", "--all")
	if ids := tableIDs(t, out); err != nil || len(ids) != 5 {
		t.Fatalf("dead tasks: %q, %v", out, err)
	}
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"redrive", "d-0", "nope"}, "redriven 1 task\n"},
		{[]string{"redrive", "--type", "dt"}, "redriven 2 tasks\n"},
		{[]string{"redrive", "--type", "dt", "-o", "json"}, "{\n  \"changed\": 0\n}\n"},
		{[]string{"delete", "e-0", "d-0"}, "deleted 1 task\n"},
		{[]string{"delete", "--all"}, "deleted 1 task\n"},
		{[]string{"delete", "--type", "et"}, "deleted 0 tasks\n"},
	} {
		out, _, err := runDQ(t, env, append([]string{"dead"}, tc.args...)...)
		if err != nil || out != tc.out {
			t.Errorf("dq dead %q: %q, %v; want %q", tc.args, out, err, tc.out)
		}
	}
	// One id keeps the single-task form: not dead is an error.
	if _, _, err := runDQ(t, env, "dead", "redrive", "d-1"); !errors.Is(err, client.ErrConflict) {
		t.Errorf("dq dead redrive d-1 (scheduled): %v, want conflict", err)
	}
	if _, _, err := runDQ(t, env, "dead", "delete", "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("dq dead delete nope: %v, want not found", err)
	}
	for _, bad := range [][]string{
		{"redrive"},
		{"delete"},
		{"redrive", "a", "--type", "t"},
		{"delete", "--type", "t", "--all"},
		{"redrive", "--due-before", "1h"},
	} {
		if _, _, err := runDQ(t, env, append([]string{"dead"}, bad...)...); err == nil || errors.As(err, new(*client.APIError)) {
			t.Errorf("dq dead %q: %v, want an error before any request", bad, err)
		}
	}
}

// TestOperatorHelp: dq tasks, dq types, dq cluster and the dead
// subcommands print their usage on -h and end in ErrHelp; without a
// subcommand dq tasks is an error after the usage.
func TestOperatorHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tasks", "-h"}, "dq tasks list [--state S]"},
		{[]string{"tasks", "list", "-h"}, "-due-before"},
		{[]string{"tasks", "cancel", "-h"}, "dq tasks cancel (ID... | --type T"},
		{[]string{"tasks", "help"}, "--all follows the cursor"},
		{[]string{"types", "-h"}, "dq types pause TYPE"},
		{[]string{"types", "pause", "-h"}, "DQ_ETCD_ENDPOINTS"},
		{[]string{"cluster", "-h"}, "oldest"},
		{[]string{"dead", "redrive", "-h"}, "dq dead redrive (ID... | --type T | --all)"},
		{[]string{"dead", "-h"}, "dq dead delete (ID... | --type T | --all)"},
	} {
		_, stderr, err := runDQ(t, nil, tc.args...)
		if !errors.Is(err, ErrHelp) || !strings.Contains(stderr, tc.want) {
			t.Errorf("dq %s: %v, %q; want ErrHelp and %q", strings.Join(tc.args, " "), err, stderr, tc.want)
		}
	}
	if _, stderr, err := runDQ(t, nil, "tasks"); err == nil || errors.Is(err, ErrHelp) || !strings.Contains(stderr, "Usage: dq tasks") {
		t.Errorf("dq tasks: %v, %q", err, stderr)
	}
	if _, _, err := runDQ(t, nil, "tasks", "purge"); err == nil || !strings.Contains(err.Error(), "purge") {
		t.Errorf("dq tasks purge: %v", err)
	}
	var usage syncBuffer
	_ = Run(t.Context(), []string{"-h"}, Env{Stderr: &usage})
	for _, cmd := range []string{"tasks", "types", "cluster", "dead redrive (ID... | --type T | --all)"} {
		if !strings.Contains(usage.String(), cmd) {
			t.Errorf("dq -h does not mention %q: %q", cmd, usage.String())
		}
	}
}

// TestGetReceiptAndListDelivered: dq get prints a task's fire receipt
// (fired at and attempt, lateness, partition/offset, leader token) when
// the daemon shows one, and no receipt line otherwise; dq tasks list
// --state delivered asks for the delivered tasks and shows their state.
func TestGetReceiptAndListDelivered(t *testing.T) {
	const delivered = `{"id":"d-1","type":"crm.sync","state":"delivered","due_at":"2030-01-01T10:00:00.000Z","attempt":1,"shard":3,` +
		`"topic":"crm.events","max_attempts":10,"priority":0,"fired_at":"2030-01-01T10:00:01.250Z","partition":0,"offset":0,` +
		`"fired_attempt":1,"fired_due_at":"2030-01-01T10:00:00.000Z","late_ms":1250,"leader_token":7}`
	const scheduled = `{"id":"s-1","type":"crm.sync","state":"scheduled","due_at":"2030-01-01T10:00:00.000Z","attempt":1,"shard":3,"max_attempts":10,"priority":0}`
	var listQuery string
	mux := http.NewServeMux()
	answer := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/tasks" {
				listQuery = r.URL.RawQuery
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}
	}
	mux.HandleFunc("GET /v1/tasks/d-1", answer(delivered))
	mux.HandleFunc("GET /v1/tasks/s-1", answer(scheduled))
	mux.HandleFunc("GET /v1/tasks", answer(`{"tasks":[`+delivered+`]}`))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	env := map[string]string{"DQ_ADDR": srv.URL}

	out, _, err := runDQ(t, env, "get", "d-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`(?m)^state:\s+delivered$`,
		`(?m)^fired at:\s+2030-01-01T10:00:01\.250Z \(attempt 1\)$`,
		`(?m)^late:\s+1\.25s$`,
		`(?m)^partition/offset:\s+0/0$`,
		`(?m)^leader token:\s+7$`,
	} {
		if !regexp.MustCompile(line).MatchString(out) {
			t.Errorf("dq get d-1: no line %s in\n%s", line, out)
		}
	}
	if out, _, err = runDQ(t, env, "get", "s-1"); err != nil || strings.Contains(out, "fired at") || strings.Contains(out, "partition") ||
		strings.Contains(out, "leader token") || strings.Contains(out, "late") {
		t.Errorf("dq get s-1 (no receipt): %q, %v", out, err)
	}

	out, _, err = runDQ(t, env, "tasks", "list", "--state", "delivered")
	if m := tableRow.FindStringSubmatch(out); err != nil || m == nil || m[1] != "d-1" || m[3] != "delivered" {
		t.Fatalf("dq tasks list --state delivered: %q, %v", out, err)
	}
	if !strings.Contains(listQuery, "state=delivered") {
		t.Errorf("list query %q", listQuery)
	}
}
