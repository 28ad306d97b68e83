package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/client"
)

// TestConsoleTasks: the console's task pages in a real headless Chromium
// against the real daemon, event and work binaries (issue 43): a task's
// attempt history (two retries, then success, each with its error as
// text), the id-prefix search across shards, a selection of two rows
// cancelled with a confirm that names "2", "run now" on a far-future
// task, the Tasks page filtered from the address, the dead letters' bulk
// actions naming scope and count, and a schedule's page listing its
// ticks linked to their tasks. Hostile text (an error body with markup)
// stays text everywhere.
func TestConsoleTasks(t *testing.T) {
	chrome := requireChromium(t)

	// The webhook: ct.flaky fails twice (500, a body with markup that
	// becomes the attempt's error), then succeeds; ct.dead fails for good
	// (400); everything else succeeds.
	var deliveries sync.Map // task id -> *int (deliveries so far)
	var mu sync.Mutex
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		v, _ := deliveries.LoadOrStore(r.Header.Get("Dq-Id"), new(int))
		n := v.(*int)
		*n++
		attempt := *n
		mu.Unlock()
		switch r.Header.Get("Dq-Type") {
		case "ct.flaky":
			if attempt <= 2 {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = fmt.Fprintf(w, `<img src=x onerror="window.`+hostileMark+`=9"> flaky attempt %d`, attempt)
				return
			}
		case "ct.dead":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, "refused for good")
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: hook, Env: map[string]string{
		"DQ_API_TOKEN":   consoleToken,
		"DQ_BACKOFF_MIN": "100ms",
		"DQ_BACKOFF_MAX": "500ms",
	}})
	api := client.New(c.DaemonURL(0), client.WithToken(consoleToken), client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	ctx := t.Context()

	// Tasks whose ids share a prefix with glob characters (matched
	// literally), and others that a glob reading of it would match.
	prefix := "c2[x]*-"
	var matching []string
	for i := range 6 {
		matching = append(matching, fmt.Sprintf("%sorder-%d", prefix, i))
	}
	others := []string{"c2xy-order-9", "c2[x]-order-8", "zz-" + prefix + "order-7"}
	far := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
	var batch []client.Task
	for _, id := range slices.Concat(matching, others) {
		batch = append(batch, client.Task{ID: id, Type: "ct.far", DueAt: far, Payload: json.RawMessage(`{}`)})
	}
	batch = append(batch,
		client.Task{ID: "flaky-1", Type: "ct.flaky", MaxAttempts: 5, Payload: json.RawMessage(`{}`)},
		client.Task{ID: "run-me", Type: "ct.later", DueAt: time.Now().Add(24 * time.Hour).Truncate(time.Millisecond), Payload: json.RawMessage(`{}`)},
		client.Task{ID: "dead-0", Type: "ct.dead", MaxAttempts: 1, Payload: json.RawMessage(`{}`)},
		client.Task{ID: "dead-1", Type: "ct.dead", MaxAttempts: 1, Payload: json.RawMessage(`{}`)},
	)
	scheduleBatch(t, api, batch)
	shards := map[int]bool{}
	for _, id := range matching {
		ti, err := api.Get(ctx, id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		shards[ti.Shard] = true
	}
	if len(shards) < 2 {
		t.Fatalf("the ids of the prefix search all live on one shard (%v): the test would not show a search across shards", shards)
	}
	if _, err := api.PutSchedule(ctx, "ct-every", client.ScheduleSpec{Cron: "@every 1s",
		Task: client.ScheduleTask{Type: "ct.tick", Headers: map[string]string{"x-note": `<svg onload="window.` + hostileMark + `=10">`}}}); err != nil {
		t.Fatalf("put schedule: %v", err)
	}
	waitState(t, api, []string{"flaky-1"}, "succeeded", 30*time.Second)
	waitState(t, api, []string{"dead-0", "dead-1"}, "dead", 30*time.Second)
	// The real work binary records each attempt's start and end: every
	// attempt started before it ended, and after the one before ended.
	if ti, err := api.Get(ctx, "flaky-1"); err != nil || len(ti.Attempts) != 3 {
		t.Fatalf("flaky-1: %v %+v, want 3 attempts", err, ti)
	} else {
		var prev time.Time
		for i, a := range ti.Attempts {
			if a.StartedAt.IsZero() || a.EndedAt.Before(a.StartedAt) || a.StartedAt.Before(prev) {
				t.Fatalf("flaky-1 attempt %d: started %v ended %v (previous ended %v)", i+1, a.StartedAt, a.EndedAt, prev)
			}
			prev = a.EndedAt
		}
	}

	p := newConsolePage(t, chrome)
	p.do(chromedp.Navigate(c.DaemonURL(0) + "/ui/"))
	p.waitJS("the sign-in form", `!document.getElementById('login').hidden`)
	p.do(chromedp.SendKeys(chromedp.CSS("#token-input"), consoleToken), chromedp.Click(chromedp.CSS("#token-submit")))
	p.waitJS("the overview", `document.getElementById('view').dataset.page === 'overview'`)

	// The id search: every task whose id starts with the prefix, on
	// whichever shard, and no other; then a selection of two of them
	// cancelled, the confirm naming "2".
	p.do(chromedp.Click(chromedp.CSS("#nav-tasks")))
	p.do(chromedp.SetValue(chromedp.CSS("#id-prefix"), prefix), chromedp.Click(chromedp.CSS("#id-search-btn")))
	want, _ := json.Marshal(matching)
	p.waitJS("the prefix search lists exactly the matching tasks", `(() => {
		const ids = [...document.querySelectorAll('[data-testid=task-row]')].map(r => r.dataset.id).sort();
		return JSON.stringify(ids) === `+jsString(string(want))+` &&
			/scanned [\d,]+ records?/.test(document.getElementById('id-search-scanned').textContent) &&
			document.getElementById('tasks-pager').hidden && !document.getElementById('id-search-pager').hidden;
	})()`)
	p.waitJS("the address names the search", `decodeURIComponent(location.hash.replace(/\+/g, ' ')) === '#/tasks?prefix=' + `+jsString(prefix))
	p.shot("tasks-search", true)
	sel := func(id string) string {
		return `[data-testid=task-row][data-id=` + jsString(id) + `] [data-testid=task-select]`
	}
	p.do(chromedp.Click(chromedp.CSS(sel(matching[0]))), chromedp.Click(chromedp.CSS(sel(matching[1]))))
	p.waitJS("2 selected", `document.getElementById('tasks-selected').textContent === '2 tasks selected' &&
		document.querySelector('[data-testid=tasks-select-all]').indeterminate`)
	p.do(chromedp.Click(chromedp.CSS("#tasks-cancel-selected")))
	p.waitJS("the confirm names the 2 selected", `(() => {
		const b = document.getElementById('tasks-cancel-selected');
		return b.dataset.armed === '1' && b.dataset.count === '2' && b.textContent === 'Confirm: cancel 2 selected tasks';
	})()`)
	p.shot("tasks-selection", true)
	p.do(chromedp.Click(chromedp.CSS("#tasks-cancel-selected")))
	p.waitJS("2 cancelled", `document.getElementById('tasks-result').textContent === 'cancelled 2 of 2 selected tasks'`)
	p.waitJS("the search shows them cancelled", p.taskRows(matching[:2], "cancelled")+` && `+p.taskRows(matching[2:], "scheduled"))
	for i, id := range matching {
		wantState := "scheduled"
		if i < 2 {
			wantState = "cancelled"
		}
		if ti, err := api.Get(ctx, id); err != nil || ti.State != wantState {
			t.Fatalf("%s after cancelling the 2 selected: %+v, %v (want %s)", id, ti, err, wantState)
		}
	}
	for _, id := range others {
		if ti, err := api.Get(ctx, id); err != nil || ti.State != "scheduled" {
			t.Fatalf("%s (not matching the prefix) after the cancel: %+v, %v (want scheduled)", id, ti, err)
		}
	}
	// Select every row on the page, then clear.
	p.do(chromedp.Click(chromedp.CSS("[data-testid=tasks-select-all]")))
	p.waitJS("every row on the page selected", `document.getElementById('tasks-selected').textContent === '6 tasks selected' &&
		[...document.querySelectorAll('[data-testid=task-select]')].every(b => b.checked)`)
	p.do(chromedp.Click(chromedp.CSS("#tasks-clear-selection")))
	p.waitJS("the selection cleared", `[...document.querySelectorAll('[data-testid=task-select]')].every(b => !b.checked) &&
		document.getElementById('tasks-cancel-selected').disabled`)

	// The Tasks page takes its filter from the address (the overview's
	// links per type use it).
	p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/tasks?type=ct.far&state=cancelled'`))
	p.waitJS("the filter from the address", `document.getElementById('view').dataset.page === 'tasks' &&
		document.getElementById('f-type').value === 'ct.far' && document.getElementById('f-state').value === 'cancelled' &&
		document.getElementById('id-prefix').value === '' && `+p.taskRows(matching[:2], "cancelled")+` &&
		document.querySelectorAll('[data-testid=task-row]').length === 2`)

	// Run now: a task due tomorrow runs within seconds.
	p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/task/run-me'`))
	p.waitJS("run-me scheduled", `(document.querySelector('[data-testid=task-state]') || {}).textContent === 'scheduled' &&
		!document.getElementById('task-run-now').disabled`)
	p.do(chromedp.Click(chromedp.CSS("#task-run-now")))
	p.waitJS("run now asks twice", `document.getElementById('task-run-now').textContent === 'Confirm: Run now'`)
	p.do(chromedp.Click(chromedp.CSS("#task-run-now")))
	p.waitJS("run-me due now", `document.getElementById('task-result').textContent.startsWith('due now: ')`)
	waitState(t, api, []string{"run-me"}, "succeeded", 20*time.Second)
	p.waitJS("run-me shown succeeded", `document.querySelector('[data-testid=task-state]').textContent === 'succeeded' &&
		document.querySelector('[data-testid=attempt-row][data-outcome=succeeded]') !== null`)

	// Dead letters: select every row on the page, and the bulk actions
	// that name their scope and count.
	p.do(chromedp.Click(chromedp.CSS("#nav-dead")))
	p.do(chromedp.SetValue(chromedp.CSS("#dead-type"), "ct.dead"), chromedp.Click(chromedp.CSS("#dead-search")))
	p.waitJS("the 2 dead letters counted", `document.getElementById('dead-count').textContent === '2 dead letters of type ct.dead' &&
		document.querySelectorAll('[data-testid=dead-row]').length === 2`)
	p.do(chromedp.Click(chromedp.CSS("[data-testid=dead-select-all]")))
	p.waitJS("both selected", `document.getElementById('dead-selected').textContent === '2 dead letters selected'`)
	p.do(chromedp.Click(chromedp.CSS("#dead-redrive-selected")))
	p.waitJS("the confirm names the 2 selected", `document.getElementById('dead-redrive-selected').textContent === 'Confirm: redrive 2 selected dead letters'`)
	p.do(chromedp.Click(chromedp.CSS("#dead-delete-type")))
	p.waitJS("the confirm names the type and the count", `document.getElementById('dead-delete-type').textContent === 'Confirm: delete every dead letter of type ct.dead: 2 (counted now)'`)
	p.shot("dead-confirm", false)
	p.do(chromedp.Click(chromedp.CSS("#dead-delete-type")))
	p.waitJS("2 deleted", `document.getElementById('dead-result').textContent === 'deleted 2 dead letter(s) of type ct.dead'`)
	for _, id := range []string{"dead-0", "dead-1"} {
		if _, err := api.Get(ctx, id); err == nil {
			t.Fatalf("%s still exists after the console deleted every dead letter of its type", id)
		}
	}

	// A schedule's page: its spec and template, the next ticks, and its
	// latest ticks (found by the id prefix "ct-every@") linked to their
	// tasks, newest first.
	p.do(chromedp.Click(chromedp.CSS("#nav-schedules")))
	p.waitJS("the schedule linked from the list", `!!document.querySelector('[data-testid=schedule-row][data-id="ct-every"] [data-testid=schedule-link]')`)
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=schedule-row][data-id="ct-every"] [data-testid=schedule-link]`)))
	p.waitJS("the schedule's page", `document.getElementById('view').dataset.page === 'schedule' &&
		document.querySelector('[data-testid=schedule-cron]').textContent === '@every 1s' &&
		document.getElementById('schedule-template').textContent.includes('<svg onload=') &&
		document.querySelectorAll('[data-testid=next-tick]').length === 5`)
	waitFor(t, 20*time.Second, "three ticks of ct-every succeeded", func() (bool, string) {
		s, err := api.GetSchedule(ctx, "ct-every")
		if err != nil || s.LastTaskID == "" {
			return false, fmt.Sprintf("%+v, %v", s, err)
		}
		ms, _ := strconv.ParseInt(strings.TrimPrefix(s.LastTaskID, "ct-every@"), 10, 64)
		for i := int64(1); i <= 3; i++ {
			ti, err := api.Get(ctx, fmt.Sprintf("ct-every@%d", ms-i*1000))
			if err != nil || ti.State != "succeeded" {
				return false, fmt.Sprintf("tick %d before the last: %+v, %v", i, ti, err)
			}
		}
		return true, ""
	})
	p.do(chromedp.Click(chromedp.CSS("#schedule-ticks-refresh")))
	p.waitJS("the latest ticks, newest first, linked to their tasks", `(() => {
		const rows = [...document.querySelectorAll('[data-testid=tick-row]')];
		const ms = rows.map(r => Number(r.dataset.ms));
		return rows.length >= 3 && rows.length <= 20 && ms.every((m, i) => i === 0 || ms[i - 1] > m) &&
			rows.every(r => r.dataset.id === 'ct-every@' + r.dataset.ms &&
				r.querySelector('[data-testid=tick-link]').getAttribute('href') === '#/task/' + encodeURIComponent(r.dataset.id)) &&
			rows.filter(r => r.dataset.state === 'succeeded').length >= 3;
	})()`)
	p.noInjection()
	p.shot("schedule", true)
	tickID, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('[data-testid=tick-row]')].find(r => r.dataset.state === 'succeeded').dataset.id`))
	if err != nil || !strings.HasPrefix(tickID, "ct-every@") {
		t.Fatalf("read a succeeded tick's id: %q, %v", tickID, err)
	}
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=tick-row][data-id=` + jsString(tickID) + `] [data-testid=tick-link]`)))
	p.waitJS("the tick's task page", `(document.querySelector('[data-testid=task-id]') || {}).textContent === `+jsString(tickID)+` &&
		document.querySelector('[data-testid=task-state]').textContent === 'succeeded'`)

	// The attempt history: retry, retry, succeeded, oldest first, the
	// webhook's error bodies as text.
	p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/task/flaky-1'`))
	p.waitJS("three attempts: retry, retry, succeeded, with their errors as text", `(() => {
		const rows = [...document.querySelectorAll('[data-testid=attempt-row]')];
		const errs = rows.map(r => r.querySelector('[data-testid=attempt-error]').textContent);
		return rows.length === 3 && rows.map(r => r.dataset.outcome).join() === 'retry,retry,succeeded' &&
			rows.map(r => r.dataset.attempt).join() === '1,2,3' &&
			errs[0].includes('<img src=x onerror=') && errs[0].includes('flaky attempt 1') &&
			errs[1].includes('flaky attempt 2') && errs[2] === '' &&
			rows.every(r => r.querySelector('[data-testid=attempt-outcome] .badge') !== null);
	})()`)
	p.noInjection()
	p.shot("task-attempts", true)

	// 400 px wide: the new parts stay within the screen.
	p.do(chromedp.EmulateViewport(400, 800))
	for _, v := range []struct{ name, hash, row string }{
		{"tasks-search", "#/tasks?prefix=" + strings.ReplaceAll(prefix, "*", "%2A"), "task-row"},
		{"task-attempts", "#/task/flaky-1", "attempt-row"},
		{"schedule", "#/schedule/ct-every", "tick-row"},
		{"dead", "#/dead", "dead-select-all"},
	} {
		p.do(chromedp.Evaluate[chromedp.Void](`location.hash = ` + jsString(v.hash)))
		p.waitJS(v.name+" at 400 px", `document.querySelector('[data-testid=`+v.row+`]') !== null && document.documentElement.scrollWidth <= 400`)
		p.shot("narrow-"+v.name, false)
	}
	p.noInjection()
	p.checkConsole()
}
