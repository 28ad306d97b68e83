package integration

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/client"
)

// TestConsoleSchedules: the console's schedules page in a real headless
// Chromium against the real daemon and event binaries: it lists the
// schedules with their state, next and last tick (the last tick comes
// from the scheduler running in the event process), pauses one, shows
// the daemon's 422 for a bad spec verbatim, creates one from the form and
// deletes one; a hostile task type stays text.
func TestConsoleSchedules(t *testing.T) {
	chrome := requireChromium(t)
	c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Env: map[string]string{"DQ_API_TOKEN": consoleToken}})
	api := client.New(c.DaemonURL(0), client.WithToken(consoleToken), client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	ctx := t.Context()

	hostileType := `</script><img/src=x/onerror=window.` + hostileMark + `=2>`
	for id, spec := range map[string]client.ScheduleSpec{
		"every-second": {Cron: "@every 1s", Task: client.ScheduleTask{Type: "console.tick", Payload: json.RawMessage(`{"n":1}`)}},
		"hostile": {Cron: "0 0 3 * * *", Timezone: "America/New_York", Paused: true,
			Task: client.ScheduleTask{Type: hostileType, Headers: map[string]string{"x": `<svg onload="window.` + hostileMark + `=3">`}}},
	} {
		if _, err := api.PutSchedule(ctx, id, spec); err != nil {
			t.Fatalf("put schedule %s: %v", id, err)
		}
	}

	p := newConsolePage(t, chrome)
	p.do(chromedp.Navigate(c.DaemonURL(0) + "/ui/"))
	p.waitJS("the sign-in form", `!document.getElementById('login').hidden`)
	p.do(chromedp.SendKeys(chromedp.CSS("#token-input"), consoleToken), chromedp.Click(chromedp.CSS("#token-submit")))
	p.waitJS("the overview", `document.getElementById('view').dataset.page === 'overview'`)
	// The header's text that arrives with a refresh (the namespace) must not
	// move the nav's links: a click aimed at Schedules while the namespace
	// was being filled in once landed on Types (chromedp clicks at the
	// coordinates it measured, as a pointer would).
	p.waitJS("the nav links stay put when the namespace changes", `(() => {
		const n = document.getElementById('namespace'), a = document.getElementById('nav-schedules');
		const x = a.getBoundingClientRect().x, old = n.textContent;
		n.textContent = 'a-much-longer-namespace-than-before';
		const still = a.getBoundingClientRect().x === x;
		n.textContent = old;
		return still;
	})()`)
	p.do(chromedp.Click(chromedp.CSS("#nav-schedules")))

	row := func(id string) string {
		return `document.querySelector('[data-testid=schedule-row][data-id=` + jsString(id) + `]')`
	}
	p.waitJS("both schedules listed, the hostile type as text", `(() => {
		const h = `+row("hostile")+`, e = `+row("every-second")+`;
		return h && e && h.dataset.paused === 'true' && e.dataset.paused === 'false' &&
			h.querySelector('[data-testid=schedule-type]').textContent === `+jsString(hostileType)+` &&
			h.querySelector('[data-testid=schedule-state]').textContent === 'paused' &&
			e.querySelector('[data-testid=schedule-state]').textContent === 'running' &&
			h.children[2].textContent === 'America/New_York' && /0[23]:00:00\.000-0[45]:00/.test(h.children[5].textContent);
	})()`)
	// The scheduler in the event process materializes the ticks; the page
	// shows the last one with its task id.
	p.waitJS("the last tick of every-second shown", row("every-second")+`.children[6].textContent.includes('every-second@')`)
	p.shot("schedules", false)

	// Pause from the list.
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=schedule-pause][data-id="every-second"]`)))
	p.waitJS("paused", `document.getElementById('schedules-result').textContent === 'every-second is paused' && `+row("every-second")+`.dataset.paused === 'true'`)
	if s, err := api.GetSchedule(ctx, "every-second"); err != nil || !s.Paused {
		t.Fatalf("after the console's pause: %+v, %v", s, err)
	}

	// A bad spec: the daemon's answer verbatim, nothing stored; then a good one.
	p.do(chromedp.SetValue(chromedp.CSS("#schedule-id"), "from-form"),
		chromedp.SetValue(chromedp.CSS("#schedule-spec"), `{"cron": "61 * * * *", "task": {"type": "x"}}`),
		chromedp.Click(chromedp.CSS("#schedule-save")))
	p.waitJS("the 422 shown", `document.getElementById('schedule-error').textContent.startsWith('422 invalid_schedule: cron:')`)
	if _, err := api.GetSchedule(ctx, "from-form"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a refused spec was stored: %v", err)
	}
	p.do(chromedp.SetValue(chromedp.CSS("#schedule-spec"), `{"cron": "@daily", "task": {"type": "console.daily"}}`),
		chromedp.Click(chromedp.CSS("#schedule-save")))
	p.waitJS("created from the form", `document.getElementById('schedules-result').textContent.startsWith('created from-form: next tick ') && `+row("from-form")+` !== null`)

	// Delete asks for a second click.
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=schedule-delete][data-id="hostile"]`)))
	p.waitJS("delete armed", `document.querySelector('[data-testid=schedule-delete][data-id="hostile"]').textContent === 'Confirm: Delete'`)
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=schedule-delete][data-id="hostile"]`)))
	p.waitJS("deleted", `document.getElementById('schedules-result').textContent === 'deleted hostile' && `+row("hostile")+` === null`)
	if _, err := api.GetSchedule(ctx, "hostile"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after the console's delete: %v", err)
	}

	p.noInjection()
	p.checkConsole()
}
