package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/client"
)

// The operator console (/ui/) in a real headless Chromium, driven with
// chromedp, against the real daemon, event and work binaries.
//
// Chromium comes from Debian's chromium package (or DQ_CHROMIUM names the
// binary). Without it the test is a named skip, unless CI or
// DQ_REQUIRE_CHROMIUM is set: then it fails.
//
// Screenshots of every page go to $DQ_TEST_ARTIFACTS/console (else a
// temporary directory); with DQ_CONSOLE_SCREENSHOTS=<dir> the pages shown
// in docs/console.md are written there too:
//
//	DQ_CONSOLE_SCREENSHOTS=$PWD/docs/console go test ./integration -run TestConsole

const consoleToken = "console-test-token"

// hostileMark is set by any script the hostile task manages to run.
const hostileMark = "__dqxss"

func TestConsole(t *testing.T) {
	chrome := requireChromium(t)

	// The webhook: every task succeeds, except the first delivery of a
	// console.fail task, which fails for good (400) with a body that
	// becomes the task's last error: markup that must show as text.
	var failedOnce sync.Map
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("Dq-Type") == "console.fail" {
			if _, seen := failedOnce.LoadOrStore(r.Header.Get("Dq-Id"), true); !seen {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `<img src=x onerror="window.`+hostileMark+`=7"> refused`)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	})
	c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: hook,
		Env: map[string]string{"DQ_API_TOKEN": consoleToken}})
	start := time.Now()
	api := client.New(c.DaemonURL(0), client.WithToken(consoleToken), client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))

	// Two ordinary types: some far in the future (they stay scheduled),
	// some due now (handled); one task that dies; one hostile task.
	now := time.Now()
	far := func(id, typ string, d time.Duration, payload string) client.Task {
		return client.Task{ID: id, Type: typ, DueAt: now.Add(d).Truncate(time.Millisecond), Payload: json.RawMessage(payload),
			Headers: map[string]string{"x-tenant": "acme"}}
	}
	hostileID := `<img/src=x/onerror=window.` + hostileMark + `=1>`
	hostileType := `</script><img/src=x/onerror=window.` + hostileMark + `=2>`
	tasks := []client.Task{
		far("mail-far-0", "console.mail", time.Hour, `{"to": "ann@example.com", "subject": "Your invoice", "amount": 12345678901234567890}`),
		far("mail-far-1", "console.mail", time.Hour+time.Minute, `{"to": "bob@example.com"}`),
		far("mail-far-2", "console.mail", time.Hour+2*time.Minute, `{"to": "cy@example.com"}`),
		far("sms-far-0", "console.sms", 2*time.Hour, `{"to": "+15550100"}`),
		far("sms-far-1", "console.sms", 2*time.Hour+time.Minute, `{"to": "+15550101"}`),
		{ID: "mail-now-0", Type: "console.mail", Payload: json.RawMessage(`{"n": 0}`)},
		{ID: "mail-now-1", Type: "console.mail", Payload: json.RawMessage(`{"n": 1}`)},
		{ID: "sms-now-0", Type: "console.sms", Payload: json.RawMessage(`{"n": 2}`)},
		{ID: "fail-0", Type: "console.fail", MaxAttempts: 1, Payload: json.RawMessage(`{"n": 3}`)},
		{ID: "fail-1", Type: "console.fail", MaxAttempts: 1, Payload: json.RawMessage(`{"n": 4}`)},
		{ID: "fail-2", Type: "console.fail", MaxAttempts: 1, Payload: json.RawMessage(`{"n": 5}`)},
		{
			ID: hostileID, Type: hostileType, DueAt: now.Add(3 * time.Hour).Truncate(time.Millisecond),
			Key:     `<svg onload="window.` + hostileMark + `=6">`,
			Headers: map[string]string{"x-note": `<img src=x onerror="window.` + hostileMark + `=3">`},
			Payload: json.RawMessage(`{"html": "<img src=x onerror=window.` + hostileMark + `=4>", "close": "</script><script>window.` + hostileMark + `=5</script>"}`),
		},
	}
	scheduleBatch(t, api, tasks)
	waitState(t, api, []string{"mail-now-0", "mail-now-1", "sms-now-0"}, "succeeded", 30*time.Second)
	waitState(t, api, []string{"fail-0", "fail-1", "fail-2"}, "dead", 30*time.Second)

	// The real daemon serves the console without a token (/ui redirects to
	// /ui/) with its security headers; /v1 still needs the token.
	checkConsoleServed(t, c.DaemonURL(0))

	p := newConsolePage(t, chrome)

	// Sign in: a wrong token is refused and said so; the right one opens
	// the overview.
	p.do(chromedp.Navigate(c.DaemonURL(0) + "/ui/"))
	p.waitJS("the sign-in form", `!document.getElementById('login').hidden`)
	p.shot("login", false)
	p.do(chromedp.SetValue(chromedp.CSS("#token-input"), "wrong-token"), chromedp.Click(chromedp.CSS("#token-submit")))
	p.waitJS("the wrong token refused", `document.getElementById('login-error').textContent.includes('refused the token')`)
	p.do(chromedp.SendKeys(chromedp.CSS("#token-input"), consoleToken), chromedp.Click(chromedp.CSS("#token-submit")))

	// Overview: every shard with its leader, the pending tasks, the
	// processes.
	p.waitJS("8 shards with a leader", `(() => {
		const rows = [...document.querySelectorAll('[data-testid=shard-row]')];
		return rows.length === 8 && rows.every(r => r.children[1].textContent !== 'none' && r.children[1].textContent !== '');
	})()`)
	p.waitJS("pending figure counts the far tasks", `Number((document.querySelector('[data-testid=card-pending] .v')||{}).textContent.replace(/,/g,'')) >= 6`)
	p.waitJS("daemon, event and work processes listed", `['daemon','event','work'].every(k => document.querySelector('[data-testid=proc-row][data-kind="' + k + '"]'))`)
	p.waitJS("rates computed from two polls", `/\/s$/.test(document.querySelector('[data-testid=rate-pending] .v').textContent)`)
	p.shot("overview", true)

	// Tasks: search by type; the far tasks are listed as scheduled.
	p.do(chromedp.Click(chromedp.CSS("#nav-tasks")))
	p.do(chromedp.SetValue(chromedp.CSS("#f-type"), "console.mail"), chromedp.Click(chromedp.CSS("#task-search")))
	p.waitJS("the console.mail tasks listed", p.taskRows([]string{"mail-far-0", "mail-far-1", "mail-far-2"}, "scheduled"))
	p.shot("tasks", true)
	p.do(chromedp.SetValue(chromedp.CSS("#f-state"), "succeeded"), chromedp.Click(chromedp.CSS("#task-search")))
	p.waitJS("the handled tasks listed as succeeded", p.taskRows([]string{"mail-now-0", "mail-now-1"}, "succeeded"))
	// the delivered state: offered by the filter, its badge styled
	p.waitJS("the state filter offers delivered", `[...document.querySelectorAll('#f-state option')].some(o => o.value === 'delivered')`)
	p.waitJS("the delivered badge styled", `(() => {
		const b = document.createElement('span'); b.className = 'badge delivered'; document.body.append(b);
		const bg = getComputedStyle(b).backgroundColor; b.remove();
		return bg === 'rgb(220, 242, 243)';
	})()`)

	// Task detail: the payload pretty-printed byte for byte (the big
	// number is not rounded), headers, attempts.
	p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/task/mail-far-0'`))
	p.waitJS("the task detail", `document.getElementById('task-payload').textContent.includes('"amount": 12345678901234567890')`)
	p.waitJS("the task's headers and attempts", `document.querySelector('[data-testid=header-row]') !== null &&
		/^\d+ of 10$/.test(document.querySelector('[data-testid=task-attempts]').textContent)`)
	p.shot("task", true)

	// Reschedule from the detail page.
	p.do(chromedp.SetValue(chromedp.CSS("#resched-when"), "90m"), chromedp.Click(chromedp.CSS("#task-reschedule")))
	p.waitJS("rescheduled", `document.getElementById('task-result').textContent.startsWith('rescheduled')`)
	if ti, err := api.Get(t.Context(), "mail-far-0"); err != nil || ti.DueAt.Before(time.Now().Add(80*time.Minute)) {
		t.Fatalf("mail-far-0 after the console's reschedule by 90m: %+v, %v", ti, err)
	}
	p.waitJS("no fire receipt on a task never fired", `document.querySelector('[data-testid=task-fired-at]') === null`)

	// A fired task's detail shows its fire receipt as the API has it.
	fired, err := api.Get(t.Context(), "mail-now-0")
	if err != nil || !fired.HasReceipt() {
		t.Fatalf("mail-now-0 (succeeded) without a fire receipt: %+v, %v", fired, err)
	}
	p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/task/mail-now-0'`))
	p.waitJS("the fire receipt of a handled task", `(() => {
		const f = (k) => (document.querySelector('[data-testid=' + k + ']') || {}).textContent;
		return f('task-id') === 'mail-now-0' && f('task-fired-at') === `+jsString(fired.FiredAt.UTC().Format("2006-01-02 15:04:05.000Z"))+` &&
			f('task-partition') === `+jsString(fmt.Sprint(fired.Partition))+` && f('task-offset') === `+jsString(fmt.Sprint(fired.Offset))+` &&
			f('task-fired-attempt') === `+jsString(fmt.Sprint(fired.FiredAttempt))+` && f('task-late') === `+jsString(fmt.Sprintf("%d ms", fired.LateMs))+` &&
			f('task-leader-token') === `+jsString(fmt.Sprint(fired.LeaderToken))+`;
	})()`)
	p.shot("task-receipt", false)

	// The hostile task: every field shows as text; nothing it carries runs.
	p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/task/' + encodeURIComponent(` + jsString(hostileID) + `)`))
	p.waitJS("the hostile task's detail", `document.getElementById('task-payload').textContent.includes('</script><script>window.`+hostileMark+`=5</script>')`)
	p.waitJS("the hostile id, type, key and header shown as text", `document.querySelector('[data-testid=task-id]').textContent === `+jsString(hostileID)+` &&
		document.querySelector('[data-testid=task-type]').textContent === `+jsString(hostileType)+` &&
		document.querySelector('[data-testid=task-key]').textContent.startsWith('<svg') &&
		document.getElementById('task-headers').textContent.includes('<img src=x onerror=')`)
	p.noInjection()
	p.shot("hostile", false)
	p.do(chromedp.Click(chromedp.CSS("#nav-tasks")))
	p.do(chromedp.SetValue(chromedp.CSS("#f-state"), ""), chromedp.SetValue(chromedp.CSS("#f-type"), hostileType), chromedp.Click(chromedp.CSS("#task-search")))
	p.waitJS("the hostile task listed", p.taskRows([]string{hostileID}, "scheduled"))
	p.noInjection()

	// Rate limits: the API's validation error verbatim, then a rule saved
	// and listed with its usage.
	p.do(chromedp.Click(chromedp.CSS("#nav-limits")))
	bad := `{"window_quota": {"limit": 0, "window": "1s"}}`
	p.do(chromedp.SetValue(chromedp.CSS("#limit-type"), "console.mail"), chromedp.SetValue(chromedp.CSS("#limit-rule"), bad),
		chromedp.Click(chromedp.CSS("#limit-save")))
	status, code, msg := consoleLimitPut(t, c.DaemonURL(0)+"/v1/limits/console.mail", bad) // the same request: it changes nothing
	if status != http.StatusUnprocessableEntity {
		t.Fatalf("PUT an invalid rule: %d %s %s", status, code, msg)
	}
	p.waitJS("the API's error shown verbatim", `document.getElementById('limit-error').textContent === `+jsString(fmt.Sprintf("%d %s: %s", status, code, msg)))
	p.do(chromedp.SetValue(chromedp.CSS("#limit-rule"), `{"window_quota": {"limit": 500, "window": "1s"}}`), chromedp.Click(chromedp.CSS("#limit-save")))
	p.waitJS("the rule saved and listed", `document.getElementById('limit-result').textContent.startsWith('saved') &&
		!!document.querySelector('[data-testid=limit-row][data-type="console.mail"]')`)
	if status, code, msg := consoleGet(t, c.DaemonURL(0)+"/v1/limits/console.mail"); status != http.StatusOK || !strings.Contains(msg, `"limit":500`) {
		t.Fatalf("GET /v1/limits/console.mail after the console saved it: %d %s %s", status, code, msg)
	}
	consoleKeyedLimit(t, p, api, c.DaemonURL(0))
	p.shot("limits", true)

	// Dead letters: the reason as text; redrive from the list, and the
	// task then runs (its second delivery succeeds).
	p.do(chromedp.Click(chromedp.CSS("#nav-dead")))
	p.waitJS("fail-0 listed dead with its reason", `(() => {
		const r = [...document.querySelectorAll('[data-testid=dead-row]')].find(r => r.dataset.id === 'fail-0');
		return !!r && r.querySelector('[data-testid=dead-reason]').textContent.includes('<img src=x onerror=');
	})()`)
	p.noInjection()
	p.shot("dead", true)
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=dead-redrive][data-id="fail-0"]`)))
	p.waitJS("redriven", `document.getElementById('dead-result').textContent.startsWith('redriven fail-0')`)
	waitState(t, api, []string{"fail-0"}, "succeeded", 30*time.Second)
	// Delete the selected dead letters: one DELETE /v1/dead naming their
	// ids (issue 40: that endpoint deleted every dead letter whatever its
	// body named).
	p.waitJS("fail-1 listed dead", `!!document.querySelector('[data-testid=dead-row][data-id="fail-1"] [data-testid=dead-select]')`)
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=dead-row][data-id="fail-1"] [data-testid=dead-select]`)),
		chromedp.Click(chromedp.CSS("#dead-delete-selected")), chromedp.Click(chromedp.CSS("#dead-delete-selected")))
	p.waitJS("the selected dead letter deleted", `document.getElementById('dead-result').textContent === 'deleted 1 of 1 selected'`)
	if _, err := api.Get(t.Context(), "fail-1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("fail-1 after the console deleted it: %v (want not found)", err)
	}
	// ... and every dead letter (no type filter): the body {"filter":{}}
	// names them all (a DELETE /v1/dead that names nothing is refused).
	p.do(chromedp.Click(chromedp.CSS("#dead-delete-type")), chromedp.Click(chromedp.CSS("#dead-delete-type")))
	p.waitJS("every dead letter deleted", `document.getElementById('dead-result').textContent === 'deleted 1 dead letter(s) of every type'`)
	if _, err := api.Get(t.Context(), "fail-2"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("fail-2 after the console deleted every dead letter: %v (want not found)", err)
	}

	// Types: pause console.mail; tasks of it that fall due are parked
	// (state paused, counted on the types page), then run once resumed.
	p.do(chromedp.Click(chromedp.CSS("#nav-types")))
	p.waitJS("console.mail listed running", `!!document.querySelector('[data-testid=type-row][data-type="console.mail"][data-paused="false"]')`)
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=type-pause][data-type="console.mail"]`)))
	p.waitJS("console.mail paused", `!!document.querySelector('[data-testid=type-row][data-type="console.mail"][data-paused="true"]')`)
	if status, code, msg := consoleGet(t, c.DaemonURL(0)+"/v1/types"); status != http.StatusOK || !strings.Contains(msg, `{"type":"console.mail","paused":true`) {
		t.Fatalf("GET /v1/types after the console paused console.mail: %d %s %s", status, code, msg)
	}
	parked := []string{"pause-0", "pause-1", "pause-2"}
	var due []client.Task
	for _, id := range parked {
		// Due in a second: time for every worker's watcher to see the pause.
		due = append(due, client.Task{ID: id, Type: "console.mail", Payload: json.RawMessage(`{}`), DueAt: time.Now().Add(time.Second).Truncate(time.Millisecond)})
	}
	scheduleBatch(t, api, due)
	p.waitJS("3 tasks parked", `document.querySelector('[data-testid=type-row][data-type="console.mail"] [data-testid=type-parked]').textContent === '3'`)
	p.noInjection() // the hostile type is listed here too
	p.shot("types", true)
	p.do(chromedp.Click(chromedp.CSS("#nav-tasks")))
	p.do(chromedp.SetValue(chromedp.CSS("#f-state"), "paused"), chromedp.SetValue(chromedp.CSS("#f-type"), "console.mail"),
		chromedp.Click(chromedp.CSS("#task-search")))
	p.waitJS("the parked tasks listed as paused", p.taskRows(parked, "paused"))
	p.shot("tasks-paused", false)

	// Cancel what the search lists (issue 40: "cancel every waiting task"
	// cancelled 12 where the list showed 9, the paused ones included, and
	// its confirm named no count). The waiting search lists the 3
	// console.mail tasks still scheduled, not the 3 parked ones; the
	// confirm names 3 and says so; exactly those 3 are cancelled.
	mailFar := []string{"mail-far-0", "mail-far-1", "mail-far-2"}
	p.do(chromedp.SetValue(chromedp.CSS("#f-state"), ""), chromedp.Click(chromedp.CSS("#task-search")))
	p.waitJS("the waiting console.mail tasks listed", p.taskRows(mailFar, "scheduled"))
	p.do(chromedp.Click(chromedp.CSS("#tasks-cancel-matching")))
	p.waitJS("the confirm names the 3 listed", `(() => {
		const b = document.getElementById('tasks-cancel-matching');
		return b.dataset.armed === '1' && b.dataset.count === '3' &&
			b.textContent.startsWith('Confirm: cancel 3 scheduled + retrying task(s)') && b.textContent.includes('paused tasks of paused types are not included');
	})()`)
	p.shot("tasks-cancel-confirm", false)
	p.do(chromedp.Click(chromedp.CSS("#tasks-cancel-matching")))
	p.waitJS("3 cancelled", `document.getElementById('tasks-result').textContent === 'cancelled 3 of the 3 task(s) listed'`)
	for _, id := range mailFar {
		if ti, err := api.Get(t.Context(), id); err != nil || ti.State != "cancelled" {
			t.Fatalf("%s after the console's cancel of what it listed: %+v, %v (want cancelled)", id, ti, err)
		}
	}
	for _, id := range parked {
		if ti, err := api.Get(t.Context(), id); err != nil || ti.State != "paused" {
			t.Fatalf("%s while its type is paused: %+v, %v (want paused)", id, ti, err)
		}
	}
	p.do(chromedp.Click(chromedp.CSS("#nav-types")))
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=type-resume][data-type="console.mail"]`)))
	p.waitJS("console.mail resumed", `!!document.querySelector('[data-testid=type-row][data-type="console.mail"][data-paused="false"]')`)
	waitState(t, api, parked, "succeeded", 30*time.Second)

	// Back to the overview for the last look, then the page's own health:
	// no script error, no CSP report; and the CSP really is enforced.
	p.do(chromedp.Click(chromedp.CSS("#nav-overview")))
	p.waitJS("the overview again", `document.querySelectorAll('[data-testid=shard-row]').length === 8`)
	// the processes' own counters (registry, about every 5 s) as rates
	p.waitJS("fired and succeeded rates from the processes' counters", `['rate-fired','rate-succeeded'].every(k => /\/s$/.test(document.querySelector('[data-testid=' + k + '] .v').textContent))`)
	p.noInjection()
	p.checkConsole()
	t.Logf("console: scenario ran in %v (after the cluster started); screenshots in %s", time.Since(start).Round(100*time.Millisecond), p.dir)
}

// TestConsoleWithoutToken: against a daemon without a token the console
// asks for none (issue 43): a new tab on a deep link lands on its page;
// #/task/ without an id says so; at 400 px wide the header fits the
// screen, its links stay readable, and ids stay on one line.
func TestConsoleWithoutToken(t *testing.T) {
	chrome := requireChromium(t)
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("Dq-Type") == "narrow.fail" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, "refused for good")
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: hook})
	api := client.New(c.DaemonURL(0), client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	// ids long enough to wrap on a narrow screen, with break points
	longID := "order-2024-11-05-eu-west-1-customer-0001234567-invoice-reminder"
	deadID := "dead-" + longID
	scheduleBatch(t, api, []client.Task{
		{ID: longID, Type: "narrow.mail", DueAt: time.Now().Add(time.Hour).Truncate(time.Millisecond), Payload: json.RawMessage(`{}`)},
		{ID: deadID, Type: "narrow.fail", MaxAttempts: 1, Payload: json.RawMessage(`{}`)},
	})
	waitState(t, api, []string{deadID}, "dead", 30*time.Second)

	p := newConsolePage(t, chrome)
	onPage := func(page string) string {
		return `document.getElementById('login').hidden && !document.getElementById('view').hidden &&
			document.getElementById('view').dataset.page === ` + jsString(page)
	}
	// A deep link in a fresh tab: the dead letters, no sign-in on the way
	// (the sign-in form is never shown, not even for a moment).
	p.do(chromedp.Navigate(c.DaemonURL(0) + "/ui/#/dead"))
	p.waitJS("the dead letters page without a sign-in", onPage("dead")+` &&
		!!document.querySelector('[data-testid=dead-row][data-id=`+jsString(deadID)+`]')`)
	p.waitJS("no sign-out button without a token", `document.getElementById('logout').hidden &&
		document.getElementById('login-error').textContent === ''`)
	// A new tab holds nothing in its session storage: a task's deep link.
	p.do(chromedp.Evaluate[chromedp.Void](`sessionStorage.clear()`), chromedp.Navigate("about:blank"),
		chromedp.Navigate(c.DaemonURL(0)+"/ui/#/task/"+longID))
	p.waitJS("the task's deep link without a sign-in", onPage("task")+` &&
		(document.querySelector('[data-testid=task-id]') || {}).textContent === `+jsString(longID))
	// #/task/ names no task: a message, not the API's 404.
	p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/task/'`))
	p.waitJS("#/task/ says it has no id", onPage("task")+` &&
		/^No task id/.test((document.querySelector('[data-testid=task-no-id]') || {}).textContent)`)
	p.waitJS("no API error on #/task/", `!document.body.textContent.includes('404')`)

	// 400 px wide: every page's header ends inside the screen, nothing
	// widens the page, the nav links are readable (not squeezed: each
	// on one line, inside the screen) and id cells hold one line.
	p.do(chromedp.EmulateViewport(400, 800))
	for _, page := range []string{"overview", "tasks", "dead", "limits", "types", "schedules"} {
		p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/` + page + `'`))
		p.waitJS(page+" at 400 px", onPage(page))
		if page == "tasks" {
			p.do(chromedp.SetValue(chromedp.CSS("#f-type"), "narrow.mail"), chromedp.Click(chromedp.CSS("#task-search")))
			p.waitJS("the long id listed", p.taskRows([]string{longID}, "scheduled"))
		}
		p.waitJS(page+": the header and page within 400 px", narrowFits)
		switch page {
		case "tasks":
			p.waitJS("the task id on one line", oneLineID(`[data-testid=task-row][data-id=`+jsString(longID)+`] td.id`))
		case "dead":
			p.waitJS("the dead letter's id on one line", oneLineID(`[data-testid=dead-row][data-id=`+jsString(deadID)+`] td.id`))
		}
		p.shot("narrow-"+page, false)
	}
	p.checkConsole()
}

// narrowFits is an expression: the header's right edge and the page's
// width are within the viewport, and each nav link is one line inside it.
const narrowFits = `(() => {
	const vw = window.innerWidth;
	const top = document.querySelector('header.top');
	const links = [...document.querySelectorAll('#nav a')];
	return vw === 400 && top.getBoundingClientRect().right <= vw && top.scrollWidth <= top.clientWidth &&
		document.documentElement.scrollWidth <= vw &&
		links.length === 7 && links.every(a => {
			const r = a.getBoundingClientRect();
			return a.getClientRects().length === 1 && r.left >= 0 && r.right <= vw && r.width + 1 >= a.scrollWidth;
		});
})()`

// oneLineID is an expression: the id cell that sel names shows its id on
// one line (one line box, not taller than one line) and is wider than a
// few characters.
func oneLineID(sel string) string {
	return `(() => {
		const td = document.querySelector(` + jsString(sel) + `);
		if (!td) return false;
		const a = td.querySelector('a') || td;
		const lh = parseFloat(getComputedStyle(a).lineHeight);
		const r = a.getBoundingClientRect();
		// one line box: every fragment (an ellipsis makes several) at one top
		const tops = new Set([...a.getClientRects()].map(x => Math.round(x.top)));
		return tops.size === 1 && r.height < 1.5 * lh && td.getBoundingClientRect().width > 80 &&
			td.title === td.textContent;
	})()`
}

func checkConsoleServed(t *testing.T, base string) {
	t.Helper()
	resp, err := hc.Get(base + "/ui")
	if err != nil {
		t.Fatalf("GET /ui: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/" || !bytes.Contains(b, []byte(`id="token-input"`)) {
		t.Fatalf("GET /ui without a token: %s at %s, want the console's page at /ui/", resp.Status, resp.Request.URL.Path)
	}
	for k, want := range map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("GET /ui/: %s %q, want %q", k, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("GET /ui/: Content-Security-Policy %q", csp)
	}
	resp, err = hc.Get(base + "/v1/stats")
	if err != nil {
		t.Fatalf("GET /v1/stats: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/stats without the token: %s, want 401", resp.Status)
	}
}

// consolePage is one browser tab on the console.
type consolePage struct {
	t    *testing.T
	ctx  context.Context
	dir  string // artifacts
	docs string // DQ_CONSOLE_SCREENSHOTS, or ""

	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func newConsolePage(t *testing.T, chrome string) *consolePage {
	t.Helper()
	opts := slices.Concat(chromedp.DefaultExecAllocatorOptions[:], []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.NoSandbox, // CI containers run as root, where Chromium's sandbox cannot start
		chromedp.WindowSize(1400, 900),
		chromedp.Flag("disable-gpu", true),
	})
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	p := &consolePage{t: t, ctx: ctx, dir: artifactsDir(t), docs: os.Getenv("DQ_CONSOLE_SCREENSHOTS")}
	// The first Run starts the browser; it must not run under a timeout
	// (the timeout would end the browser).
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.msgs = append(p.msgs, m)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		<-done
	})
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium %s: %v", chrome, err)
	}
	return p
}

// do runs browser steps, each call within 20 s.
func (p *consolePage) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("browser: %v\n--- page ---\n%s", err, p.text())
	}
}

// waitJS polls a JavaScript expression until it is true (15 s).
func (p *consolePage) waitJS(what, expr string) {
	p.t.Helper()
	last := ""
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if err != nil {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("console: timed out waiting for %s (last error: %s)\n--- page ---\n%s", what, last, p.text())
		}
		select {
		case <-p.ctx.Done():
			p.t.Fatalf("console: browser gone while waiting for %s", what)
		case <-time.After(50 * time.Millisecond): // poll interval of a bounded wait
		}
	}
}

// taskRows is an expression: the task search lists each of ids (by
// data-id) in state.
func (p *consolePage) taskRows(ids []string, state string) string {
	b, _ := json.Marshal(ids)
	return fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll('[data-testid=task-row]')];
		return %s.every(id => rows.some(r => r.dataset.id === id && r.dataset.state === %s));
	})()`, b, jsString(state))
}

// text is the visible text of the page, for failure messages.
func (p *consolePage) text() string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + '\n' + document.body.innerText.slice(0, 4000)`))
	if err != nil {
		return "(page text unavailable: " + err.Error() + ")"
	}
	return s
}

// noInjection: no element the hostile data describes was created and
// none of its scripts ran.
func (p *consolePage) noInjection() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		img: document.querySelectorAll('img').length,
		svg: document.querySelectorAll('svg:not(.chart)').length, // the overview's own charts are svg.chart
		scripts: document.querySelectorAll('script').length,
		mark: typeof window.`+hostileMark+`,
	})`))
	if err != nil {
		p.t.Fatalf("console: inspect the DOM: %v", err)
	}
	if want := `{"img":0,"svg":0,"scripts":1,"mark":"undefined"}`; got != want {
		p.t.Fatalf("console: hostile data changed the page: %s, want %s\n--- page ---\n%s", got, want, p.text())
	}
}

// checkConsole fails on any script error or CSP report the page logged,
// then proves the CSP is enforced: an inline script added to the page
// does not run and is reported.
func (p *consolePage) checkConsole() {
	p.t.Helper()
	p.mu.Lock()
	var bad []string
	for _, m := range p.msgs {
		csp := strings.Contains(m.Text, "Content Security Policy")
		if m.IsException() || csp {
			bad = append(bad, fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
		}
	}
	p.mu.Unlock()
	if len(bad) > 0 {
		p.t.Errorf("console: the page logged errors:\n%s", strings.Join(bad, "\n"))
	}
	p.do(chromedp.Evaluate[chromedp.Void](`(() => {
		const s = document.createElement('script');
		s.textContent = 'window.__inlineRan = true';
		document.body.append(s);
	})()`))
	p.waitJS("the CSP refusal of an inline script reported", `window.__inlineRan === undefined`)
	waitFor(p.t, 10*time.Second, "the browser reports the CSP refusal", func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, m := range p.msgs {
			if strings.Contains(m.Text, "Content Security Policy") && strings.Contains(m.Text, "inline script") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d console messages, none a CSP report", len(p.msgs))
	})
}

// shot saves a full-page PNG of the page in the artifacts directory and,
// when docs and DQ_CONSOLE_SCREENSHOTS is set, there as well.
func (p *consolePage) shot(name string, docs bool) {
	p.t.Helper()
	// Let a poll land and the layout settle: the screenshot shows the page
	// as an operator sees it, not mid-render.
	p.waitJS("the page settled before the "+name+" screenshot", `document.readyState === 'complete'`)
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		p.t.Fatalf("screenshot %s: not a PNG", name)
	}
	dirs := []string{p.dir}
	if docs && p.docs != "" {
		dirs = append(dirs, p.docs)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			p.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name+".png"), png, 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
}

// artifactsDir is $DQ_TEST_ARTIFACTS/console when set (kept after the
// test), else a temporary directory.
func artifactsDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("DQ_TEST_ARTIFACTS"); d != "" {
		return filepath.Join(d, "console")
	}
	return t.TempDir()
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// consoleKeyedLimit: the limits page sets a rule's scope with its
// controls (written into the rule's JSON, which is what is sent), lists
// the rule with its scope, the busiest values once tasks of two tenants
// ran, and loads the scope back into the controls on Edit.
func consoleKeyedLimit(t *testing.T, p *consolePage, api *client.Client, base string) {
	t.Helper()
	p.do(chromedp.SetValue(chromedp.CSS("#limit-type"), "console.tenant"),
		chromedp.SetValue(chromedp.CSS("#limit-rule"), `{"window_quota": {"limit": 500, "window": "1h"}}`),
		chromedp.Evaluate[chromedp.Void](`(() => {
			const s = document.getElementById('limit-scope');
			s.value = 'header';
			s.dispatchEvent(new Event('change'));
			const h = document.getElementById('limit-scope-header');
			h.value = 'x-tenant';
			h.dispatchEvent(new Event('input'));
			document.getElementById('limit-unordered').click();
		})()`))
	p.waitJS("the scope written into the rule", `(() => {
		const r = JSON.parse(document.getElementById('limit-rule').value);
		return r.scope === 'header:x-tenant' && r.unordered === true && r.window_quota.limit === 500;
	})()`)
	p.do(chromedp.Click(chromedp.CSS("#limit-save")))
	p.waitJS("the keyed rule saved and listed with its scope", `document.getElementById('limit-result').textContent.startsWith('saved') &&
		(document.querySelector('[data-testid=limit-row][data-type="console.tenant"] [data-testid=limit-scope]') || {}).textContent === 'per header x-tenant, unordered'`)
	if status, code, msg := consoleGet(t, base+"/v1/limits/console.tenant"); status != http.StatusOK || !strings.Contains(msg, `"scope":"header:x-tenant","unordered":true`) {
		t.Fatalf("GET /v1/limits/console.tenant after the console saved it: %d %s %s", status, code, msg)
	}

	// Two tasks of acme and one of globex run: both values are listed,
	// acme first (more admitted in the window).
	var tasks []client.Task
	for i, tenant := range []string{"acme", "acme", "globex"} {
		tasks = append(tasks, client.Task{ID: fmt.Sprintf("tenant-%d", i), Type: "console.tenant", Payload: json.RawMessage(`{}`),
			Headers: map[string]string{"x-tenant": tenant}})
	}
	scheduleBatch(t, api, tasks)
	waitState(t, api, []string{"tenant-0", "tenant-1", "tenant-2"}, "succeeded", 30*time.Second)
	p.waitJS("the busiest values listed", `(() => {
		const rows = [...document.querySelectorAll('[data-testid=limit-key-row][data-type="console.tenant"]')];
		return rows.length === 2 && rows[0].dataset.key === 'acme' && rows[0].textContent.includes('2 / 500') && rows[1].dataset.key === 'globex';
	})()`)

	// Edit loads the rule and its scope into the form.
	p.do(chromedp.SetValue(chromedp.CSS("#limit-scope"), "type"),
		chromedp.Click(chromedp.CSS(`[data-testid=limit-row][data-type="console.tenant"] [data-testid=limit-edit]`)))
	p.waitJS("the scope loaded on Edit", `document.getElementById('limit-scope').value === 'header' &&
		document.getElementById('limit-scope-header').value === 'x-tenant' && document.getElementById('limit-unordered').checked`)
}

// consoleLimitPut PUTs a rate-limit rule and returns the answer's status
// and error code and message (or the body when it is not an error).
func consoleLimitPut(t *testing.T, url, rule string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, url, strings.NewReader(rule))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return consoleSend(t, req)
}

func consoleGet(t *testing.T, url string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return consoleSend(t, req)
}

func consoleSend(t *testing.T, req *http.Request) (int, string, string) {
	t.Helper()
	req.Header.Set("Authorization", "Bearer "+consoleToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", req.Method, req.URL, err)
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if resp.StatusCode >= 400 && json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
		return resp.StatusCode, e.Error.Code, e.Error.Message
	}
	return resp.StatusCode, "", string(b)
}

// requireChromium finds the browser, or skips with a named reason — a
// failure when CI or DQ_REQUIRE_CHROMIUM is set (see requireTool).
func requireChromium(t *testing.T) string {
	t.Helper()
	return requireTool(t, "console browser test", "DQ_REQUIRE_CHROMIUM", "", chromiumPath)
}

// chromiumPath is DQ_CHROMIUM, else the first Chromium-family binary on
// PATH.
func chromiumPath() (string, error) {
	if p := os.Getenv("DQ_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("DQ_CHROMIUM=%s: %w", p, err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium, chromium-browser or google-chrome on PATH (Debian: apt-get install chromium; or set DQ_CHROMIUM)")
}
