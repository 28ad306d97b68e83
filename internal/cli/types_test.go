package cli

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
	"github.com/delayq/delayq/internal/testenv"
)

// TestTypesCommand: dq types pause and resume (idempotent, in text and
// JSON), dq types lists the types with their state and limit; a daemon
// without etcd answers 503 naming the setting.
func TestTypesCommand(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	base, _ := startDaemon(t, etcd.Endpoints)
	env := map[string]string{"DQ_ADDR": base}
	scheduleTasks(t, base, "s", "seen.type", 1, time.Now().Add(time.Hour))
	if _, _, err := runDQ(t, env, "limits", "set", "pdf.render", "--rate", "2.5", "--burst", "5", "--concurrency", "3"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"pause", "email.send"}, "email.send paused: its due tasks are parked until dq types resume email.send\n"},
		{[]string{"pause", "email.send"}, "email.send was already paused\n"},
		{[]string{"resume", "seen.type"}, "seen.type was not paused; 0 parked tasks put back to run\n"},
	} {
		out, _, err := runDQ(t, env, append([]string{"types"}, tc.args...)...)
		if err != nil || out != tc.out {
			t.Errorf("dq types %q: %q, %v; want %q", tc.args, out, err, tc.out)
		}
	}
	out, _, err := runDQ(t, env, "types")
	if err != nil || !strings.HasPrefix(out, "TYPE") {
		t.Fatalf("dq types: %q, %v", out, err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		rows[f[0]] = f
	}
	if r := rows["email.send"]; len(r) != 5 || r[1] != "paused" || !strings.HasPrefix(r[2], time.Now().UTC().Format("2006-01-02")) || r[3] != "0" || r[4] != "-" {
		t.Errorf("email.send row %q in %q", r, out)
	}
	if r := rows["seen.type"]; len(r) != 5 || r[1] != "running" || r[2] != "-" {
		t.Errorf("seen.type row %q in %q", r, out)
	}
	if !strings.Contains(out, "2.5/s burst 5, 3 running") {
		t.Errorf("pdf.render's limit not shown: %q", out)
	}
	if out2, _, err := runDQ(t, env, "types", "list", "-o", "table"); err != nil || out2 != out {
		t.Errorf("dq types list -o table: %q, %v; want %q", out2, err, out)
	}

	out, _, err = runDQ(t, env, "types", "-o", "json")
	var doc struct {
		Types []client.TypeInfo `json:"types"`
	}
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Types) != 3 {
		t.Fatalf("dq types -o json: %q, %v", out, err)
	}
	out, _, err = runDQ(t, env, "types", "resume", "email.send", "-o", "json")
	var s client.TypeState
	if err != nil || json.Unmarshal([]byte(out), &s) != nil || s != (client.TypeState{Type: "email.send", Changed: true}) {
		t.Errorf("dq types resume -o json: %q, %v", out, err)
	}

	for _, bad := range [][]string{{"pause"}, {"pause", "a", "b"}, {"resume"}, {"stop", "x"}, {"list", "x"}, {"-o", "yaml"}} {
		if _, _, err := runDQ(t, env, append([]string{"types"}, bad...)...); err == nil || errors.As(err, new(*client.APIError)) {
			t.Errorf("dq types %q: %v, want an error before any request", bad, err)
		}
	}
	var ae *client.APIError
	if _, _, err := runDQ(t, env, "types", "pause", "has space"); !errors.As(err, &ae) || ae.Status/100 != 4 || !strings.Contains(ae.Message, "type") {
		t.Errorf("pause a bad type: %v", err)
	}

	noEtcd, _ := startDaemon(t, nil)
	if _, _, err := runDQ(t, nil, "types", "pause", "x", "--addr", noEtcd); !errors.As(err, &ae) || ae.Status != 503 || !strings.Contains(ae.Message, "DQ_ETCD_ENDPOINTS") {
		t.Errorf("pause without etcd: %v", err)
	}
}

func TestRuleText(t *testing.T) {
	for _, tc := range []struct {
		r    *client.LimitRule
		want string
	}{
		{nil, "-"},
		{&client.LimitRule{}, "-"},
		{&client.LimitRule{WindowQuota: &client.WindowQuota{Limit: 100, Window: client.Duration(time.Minute)}}, "100 per 1m0s"},
		{&client.LimitRule{TokenBucket: &client.TokenBucket{Rate: 10, Burst: 20, Reserve: 5, MinPriority: 100}}, "10/s burst 20 (reserve 5 for priority >= 100)"},
		{&client.LimitRule{Concurrency: &client.Concurrency{Limit: 4}, TokenBucket: &client.TokenBucket{Rate: 0.5, Burst: 1}}, "0.5/s burst 1, 4 running"},
	} {
		if got := ruleText(tc.r); got != tc.want {
			t.Errorf("ruleText(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
