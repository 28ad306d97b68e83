// Package console provides delayq's operator console: a small single-page
// web application, embedded in the daemon binary and served at /ui/, that
// shows and steers a running system through the daemon's own /v1 API —
// shards and their leaders, processes, the journal, task search and
// detail, dead letters, rate limits, paused types and schedules.
//
// The assets (assets/index.html, app.js, app.css, favicon.svg) are plain
// HTML, CSS and modern JavaScript: no framework, no build step, nothing
// loaded from another host, so the console works offline and air-gapped.
//
// Security model:
//
//   - The assets need no token; every /v1 call the page makes carries the
//     bearer token the operator typed once (kept in sessionStorage, sent
//     as an Authorization header; no cookies, so there is no CSRF surface).
//   - Every value from the API (ids, types, payloads, headers, errors) is
//     attacker-controlled and reaches the page only through textContent
//     and DOM APIs, never through innerHTML.
//   - Each answer carries a strict Content-Security-Policy (scripts and
//     styles from the page's own origin only, no inline script or event
//     handler, fetches to the same origin only, no framing), nosniff and
//     no-referrer.
package console
