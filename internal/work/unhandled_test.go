package work

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv/worktest"
	"github.com/delayq/delayq/worker"
)

// DQ_UNHANDLED_TYPES: fail (the default) or retry; anything else is an
// error at start.
func TestConfigUnhandledTypes(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  worker.Unhandled
		err   string
	}{
		{"", worker.UnhandledFail, ""},
		{"fail", worker.UnhandledFail, ""},
		{"retry", worker.UnhandledRetry, ""},
		{"drop", 0, `unhandled-types "drop": fail or retry`},
	} {
		env := map[string]string{"DQ_WEBHOOK_URL": "http://sink/x"}
		if tc.value != "" {
			env["DQ_UNHANDLED_TYPES"] = tc.value
		}
		c, err := parse(t, nil, env)
		switch {
		case tc.err != "":
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: %v, want %q", tc.value, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.value, err)
		case c.unhandled() != tc.want:
			t.Errorf("%q: %v, want %v", tc.value, c.unhandled(), tc.want)
		}
	}
}

// A work process with webhooks for some types only: a task of another
// type is dead after its first attempt with `no handler for task type`
// by default, and retried until its last attempt with
// DQ_UNHANDLED_TYPES=retry; the type with a webhook is delivered.
func TestWorkUnhandledTypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value    string
		attempts int
	}{{"", 1}, {"retry", 3}} {
		t.Run("policy="+tc.value, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			s := newSink(t)
			file := filepath.Join(t.TempDir(), "work.json")
			if err := os.WriteFile(file, []byte(`{"webhooks": {"known": {"url": "`+s.srv.URL+`/known"}}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			vars := e.vars("")
			delete(vars, "DQ_WEBHOOK_URL")
			vars["DQ_WORK_CONFIG"] = file
			if tc.value != "" {
				vars["DQ_UNHANDLED_TYPES"] = tc.value
			}
			startApp(t, vars)
			e.Firer.Start(t)
			mystery := jsonTask("mystery-1", "mystery")
			mystery.MaxAttempts = 3
			worktest.Schedule(t, e.Store, mystery, jsonTask("known-1", "known"))
			e.WaitState(t, 20*time.Second, task.StateSucceeded, "known-1")
			e.WaitState(t, 20*time.Second, task.StateDead, "mystery-1")
			got, err := e.Store.Get(t.Context(), "mystery-1")
			if err != nil {
				t.Fatal(err)
			}
			if got.Attempt != tc.attempts || !strings.Contains(got.LastError, `no handler for task type "mystery"`) {
				t.Errorf("dead at attempt %d with %q, want attempt %d, no handler", got.Attempt, got.LastError, tc.attempts)
			}
			if s.count("known-1") != 1 || s.count("mystery-1") != 0 {
				t.Errorf("webhook calls: known-1 %d, mystery-1 %d; want 1, 0", s.count("known-1"), s.count("mystery-1"))
			}
		})
	}
}
