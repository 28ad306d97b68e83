package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/client"
)

// TestConsoleOverview: the overview's census (tasks per type, the last
// hour's chart, the coming load), the In flight page and the time zone
// setting, in a real headless Chromium against the real binaries. The
// browser runs in Asia/Kolkata (UTC+05:30, no daylight saving), so its
// local zone differs from UTC.
func TestConsoleOverview(t *testing.T) {
	chrome := requireChromium(t)

	// The webhook holds every ov.hold delivery until the test releases
	// it (the task stays claimed: in flight), refuses ov.fail for good
	// and accepts the rest.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	held := make(chan string, 8)
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.Header.Get("Dq-Type") {
		case "ov.hold":
			select {
			case held <- r.Header.Get("Dq-Id"):
			default:
			}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		case "ov.fail":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, "refused for good")
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	c := localProvisioner{}.Start(t, Spec{Daemons: 1, Events: 1, Workers: 1, Webhook: hook})
	t.Cleanup(releaseAll) // before the webhook server's own cleanup waits for its requests
	api := client.New(c.DaemonURL(0), client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))

	now := time.Now()
	later := now.Add(25 * time.Minute).Truncate(time.Millisecond) // one bucket of the next hour
	far := now.Add(3 * time.Hour).Truncate(time.Millisecond)      // beyond the hour, within 6 h
	hostileType := `</script><img/src=x/onerror=window.` + hostileMark + `=9>`
	tasks := []client.Task{
		{ID: "hold-0", Type: "ov.hold", Timeout: 5 * time.Minute, Payload: json.RawMessage(`{}`)},
		{ID: "far-0", Type: "ov.far", DueAt: far, Payload: json.RawMessage(`{}`)},
		{ID: "far-1", Type: "ov.far", DueAt: far, Payload: json.RawMessage(`{}`)},
		{ID: "hostile-0", Type: hostileType, DueAt: far, Payload: json.RawMessage(`{}`)},
	}
	for i := range 3 {
		tasks = append(tasks, client.Task{ID: fmt.Sprintf("ok-%d", i), Type: "ov.ok", Payload: json.RawMessage(`{}`)})
	}
	for i := range 2 {
		tasks = append(tasks, client.Task{ID: fmt.Sprintf("fail-%d", i), Type: "ov.fail", MaxAttempts: 1, Payload: json.RawMessage(`{}`)})
	}
	for i := range 4 {
		tasks = append(tasks, client.Task{ID: fmt.Sprintf("later-%d", i), Type: "ov.later", DueAt: later, Payload: json.RawMessage(`{}`)})
	}
	scheduleBatch(t, api, tasks)
	waitState(t, api, []string{"ok-0", "ok-1", "ok-2"}, "succeeded", 30*time.Second)
	waitState(t, api, []string{"fail-0", "fail-1"}, "dead", 30*time.Second)
	select {
	case id := <-held:
		if id != "hold-0" {
			t.Fatalf("the webhook holds %q, want hold-0", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hold-0 never reached the webhook")
	}

	// The browser inherits TZ: its local zone is Asia/Kolkata.
	t.Setenv("TZ", "Asia/Kolkata")
	p := newConsolePage(t, chrome)
	p.do(chromedp.Navigate(c.DaemonURL(0) + "/ui/#/overview"))
	// (ICU may name the zone by its older name, Asia/Calcutta)
	p.waitJS("the browser at UTC+05:30", `new Date().getTimezoneOffset() === -330`)

	// Tasks per type: the figures of each type, linked to its search.
	countIs := func(typ, state string, n int) string {
		return fmt.Sprintf(`((document.querySelector('[data-testid=count-row][data-type=%s] [data-testid=count-%s]') || {}).textContent === %q)`,
			jsString(typ), state, strconv.Itoa(n))
	}
	p.waitJS("the counts per type", countIs("ov.ok", "succeeded", 3)+` && `+countIs("ov.fail", "dead", 2)+` && `+
		countIs("ov.later", "scheduled", 4)+` && `+countIs("ov.far", "scheduled", 2)+` && `+countIs(hostileType, "scheduled", 1)+` &&
		document.querySelector('[data-testid=count-totals] [data-testid=count-succeeded]').textContent === '3' &&
		document.querySelector('[data-testid=count-totals] [data-testid=count-dead]').textContent === '2' &&
		document.querySelector('[data-testid=counts-note]').dataset.sampled === 'false'`)
	// the last hour: the 3 succeeded and 2 dead, in the summary and the bars
	p.waitJS("the last hour's chart", `(() => {
		const bars = [...document.querySelectorAll('[data-testid=history-bar]')];
		const sum = (cls) => bars.reduce((a, g) => a + [...g.querySelectorAll('rect.' + cls)].reduce((b, r) => b + Number(r.dataset.value), 0), 0);
		const box = document.querySelector('[data-testid=history-chart]');
		return bars.length === 60 && sum('succeeded') === 3 && sum('dead') === 2 && box.dataset.succeeded === '3' && box.dataset.dead === '2' &&
			/: 3 succeeded, 2 dead/.test(document.querySelector('[data-testid=history-summary]').textContent) &&
			document.querySelector('[data-testid=history-svg]').getAttribute('aria-labelledby') === 'history-summary';
	})()`)
	// the coming hour: 12 buckets of 5 min, the 4 ov.later tasks in one
	p.waitJS("the coming hour's load", loadIs(12, 4, 4)+` && /^\d+$/.test(document.querySelector('[data-testid=load-overdue]').textContent)`)
	p.noInjection() // the hostile type is a row and an option of the type selector
	p.shot("overview", true)

	// 6 h adds the ov.far and hostile tasks; one type shows its own.
	p.do(setSelect("load-horizon", "6h"))
	p.waitJS("the next 6 h", loadIs(12, 7, 4))
	p.do(setSelect("load-type", "ov.far"))
	p.waitJS("ov.far's load", loadIs(12, 2, 2))
	p.do(setSelect("load-type", hostileType))
	p.waitJS("the hostile type's load", loadIs(12, 1, 1))
	p.noInjection()
	p.do(setSelect("load-type", "ov.later"), setSelect("load-horizon", "1h"))
	p.waitJS("ov.later's hour", loadIs(12, 4, 4))
	p.shotElement("load", "#load-section")
	p.do(setSelect("load-horizon", "15m"))
	p.waitJS("ov.later in the next 15 min: none", loadIs(15, 0, 0))
	p.do(setSelect("load-type", ""), setSelect("load-horizon", "1h"))

	// A type's name opens the task search for it.
	p.do(chromedp.Click(chromedp.CSS(`[data-testid=count-row][data-type="ov.later"] [data-testid=count-type-link]`)))
	p.waitJS("the search for ov.later", `document.getElementById('view').dataset.page === 'tasks' && document.getElementById('f-type').value === 'ov.later'`)
	p.waitJS("ov.later's tasks listed", p.taskRows([]string{"later-0", "later-1", "later-2", "later-3"}, "scheduled"))

	// In flight: the held task with its owner, as the API has it.
	owner := inflightOwner(t, c.DaemonURL(0), "hold-0")
	p.do(chromedp.Click(chromedp.CSS("#nav-inflight")))
	p.waitJS("hold-0 in flight", `(() => {
		const r = document.querySelector('[data-testid=inflight-row][data-id="hold-0"]');
		return !!r && r.dataset.type === 'ov.hold' && r.querySelector('[data-testid=inflight-owner]').textContent === `+jsString(owner)+` &&
			/^in \d/.test(r.querySelector('[data-testid=inflight-expires]').firstChild.textContent);
	})()`)
	p.shot("inflight", true)

	// The time zone: UTC by default; local shows the same instant at
	// +05:30, names the zone, and stays chosen after a reload.
	p.waitJS("UTC by default", `document.getElementById('tz-select').value === 'utc'`)
	p.expiresShown(time.UTC, "2006-01-02 15:04:05.000Z")
	p.do(setSelect("tz-select", "local"))
	p.waitJS("the local zone named", `document.getElementById('tz-select').selectedOptions[0].textContent ===
		'local (' + Intl.DateTimeFormat().resolvedOptions().timeZone + ')' && /^local \(Asia\/(Kolkata|Calcutta)\)$/.test(document.getElementById('tz-select').selectedOptions[0].textContent)`)
	p.expiresShown(time.FixedZone("IST", 5*3600+1800), "2006-01-02 15:04:05.000 -07:00")
	p.do(chromedp.Reload())
	p.waitJS("local kept after a reload", `document.getElementById('tz-select').value === 'local' && !!document.querySelector('[data-testid=inflight-row]')`)
	p.expiresShown(time.FixedZone("IST", 5*3600+1800), "2006-01-02 15:04:05.000 -07:00")
	p.do(setSelect("tz-select", "utc"))
	p.expiresShown(time.UTC, "2006-01-02 15:04:05.000Z")

	// 400 px wide: the charts are redrawn to the screen's width and
	// nothing widens the page.
	p.do(chromedp.EmulateViewport(400, 800))
	p.waitJS("in flight at 400 px", narrowFits)
	p.do(chromedp.Click(chromedp.CSS("#nav-overview")))
	p.waitJS("the overview at 400 px", `['history-svg', 'gauge-svg', 'load-svg'].every(k => {
		const s = document.querySelector('[data-testid=' + k + ']');
		return !!s && Number(s.getAttribute('width')) <= 380 && s.getBoundingClientRect().right <= 400;
	}) && `+narrowFits)
	p.shot("narrow-overview-census", false)
	p.do(chromedp.EmulateViewport(1400, 900))

	// Released, hold-0 succeeds and the page says nothing is in flight.
	releaseAll()
	waitState(t, api, []string{"hold-0"}, "succeeded", 30*time.Second)
	p.do(chromedp.Click(chromedp.CSS("#nav-inflight")))
	p.waitJS("nothing in flight", `(document.querySelector('#inflight-table-body td.empty') || {}).textContent === 'No task is held by a worker right now.'`)
	p.noInjection()
	p.checkConsole()
}

// loadIs is an expression: the coming-load chart has n bars, their counts
// sum to total and the largest is peak.
func loadIs(n, total, peak int) string {
	return fmt.Sprintf(`(() => {
		const bars = [...document.querySelectorAll('[data-testid=load-bar]')].map(g => Number(g.dataset.count));
		return bars.length === %d && bars.reduce((a, b) => a + b, 0) === %d && Math.max(0, ...bars) === %d &&
			document.querySelector('[data-testid=load-chart]').dataset.total === '%d';
	})()`, n, total, peak, total)
}

// setSelect chooses value in the select with id, as a user does (the
// change event included).
func setSelect(id, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`(() => {
		const s = document.getElementById(` + jsString(id) + `);
		s.value = ` + jsString(value) + `;
		if (s.value !== ` + jsString(value) + `) throw new Error('no option ' + ` + jsString(value) + `);
		s.dispatchEvent(new Event('change'));
	})()`)
}

// expiresShown waits until the in-flight row of hold-0 shows its claim's
// deadline (the cell's title, RFC 3339) formatted in zone with layout.
func (p *consolePage) expiresShown(zone *time.Location, layout string) {
	p.t.Helper()
	waitFor(p.t, 15*time.Second, "hold-0's claim deadline shown in "+zone.String(), func() (bool, string) {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
			const c = document.querySelector('[data-testid=inflight-row][data-id="hold-0"] [data-testid=inflight-expires]');
			return c ? [c.title, c.querySelector('[data-testid=inflight-expires-at]').textContent] : ['', ''];
		})()`))
		if err != nil || len(got) != 2 {
			return false, fmt.Sprintf("%v %v", got, err)
		}
		at, err := time.Parse(time.RFC3339Nano, got[0])
		if err != nil {
			return false, fmt.Sprintf("title %q: %v", got[0], err)
		}
		want := at.In(zone).Format(layout)
		return got[1] == want, fmt.Sprintf("shown %q, want %q (claim deadline %s)", got[1], want, got[0])
	})
}

// shotElement saves a PNG of the element sel names, like shot (docs
// included when DQ_CONSOLE_SCREENSHOTS is set).
func (p *consolePage) shotElement(name, sel string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		p.t.Fatalf("screenshot %s of %s: %v", name, sel, err)
	}
	for _, d := range []string{p.dir, p.docs} {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			p.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name+".png"), png, 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
}

// inflightOwner is the claim owner GET /v1/inflight names for id.
func inflightOwner(t *testing.T, base, id string) string {
	t.Helper()
	var owner string
	waitFor(t, 15*time.Second, id+" listed by GET /v1/inflight", func() (bool, string) {
		resp, err := hc.Get(base + "/v1/inflight")
		if err != nil {
			return false, err.Error()
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		var r struct {
			Tasks []struct{ ID, Owner string } `json:"tasks"`
		}
		if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil {
			return false, fmt.Sprintf("%s %s %v", resp.Status, body, err)
		}
		for _, x := range r.Tasks {
			if x.ID == id && x.Owner != "" {
				owner = x.Owner
				return true, ""
			}
		}
		return false, body
	})
	return owner
}
