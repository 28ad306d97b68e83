package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkSecurityHeaders: every answer, errors included, carries them.
func checkSecurityHeaders(t *testing.T, path string, resp *http.Response) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": ContentSecurityPolicy,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"X-Frame-Options":         "DENY",
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", path, k, got, v)
		}
	}
	if resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("%s: sets a cookie", path)
	}
}

func TestAssetsServed(t *testing.T) {
	h := Handler()
	for _, tc := range []struct{ path, ctype, contains string }{
		{"/ui/", "text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		{"/ui/index.html", "text/html; charset=utf-8", `id="token-input"`},
		{"/ui/app.js", "text/javascript; charset=utf-8", "sessionStorage"},
		{"/ui/app.css", "text/css; charset=utf-8", ".badge"},
		{"/ui/favicon.svg", "image/svg+xml", "<svg"},
	} {
		resp := get(t, h, http.MethodGet, tc.path, nil)
		b := body(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", tc.path, resp.StatusCode)
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if !strings.Contains(b, tc.contains) {
			t.Errorf("GET %s: body lacks %q", tc.path, tc.contains)
		}
		if resp.Header.Get("ETag") == "" || resp.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: ETag %q, Cache-Control %q", tc.path, resp.Header.Get("ETag"), resp.Header.Get("Cache-Control"))
		}
		checkSecurityHeaders(t, tc.path, resp)

		// Revalidation answers 304 without a body; HEAD has no body.
		nm := get(t, h, http.MethodGet, tc.path, map[string]string{"If-None-Match": resp.Header.Get("ETag")})
		if nm.StatusCode != http.StatusNotModified || body(t, nm) != "" {
			t.Errorf("GET %s with its ETag: %d, want 304 and no body", tc.path, nm.StatusCode)
		}
		head := get(t, h, http.MethodHead, tc.path, nil)
		if head.StatusCode != http.StatusOK || body(t, head) != "" || head.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("HEAD %s: %d, Content-Type %q", tc.path, head.StatusCode, head.Header.Get("Content-Type"))
		}
	}
}

func TestNotFoundAndMethods(t *testing.T) {
	h := Handler()
	for _, p := range []string{"/ui/missing.js", "/ui/assets/app.js", "/ui/app.js/", "/ui/../console.go", "/ui/%2e%2e/console.go", "/other", "/ui"} {
		resp := get(t, h, http.MethodGet, p, nil)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
		checkSecurityHeaders(t, p, resp)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		resp := get(t, h, m, "/ui/", nil)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /ui/: %d, Allow %q", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
		checkSecurityHeaders(t, m+" /ui/", resp)
	}
}

func TestCSPIsStrict(t *testing.T) {
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "base-uri 'none'"} {
		if !strings.Contains(ContentSecurityPolicy, want) {
			t.Errorf("CSP lacks %q: %s", want, ContentSecurityPolicy)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*", "data:", "http:", "https:"} {
		if strings.Contains(ContentSecurityPolicy, bad) {
			t.Errorf("CSP allows %q: %s", bad, ContentSecurityPolicy)
		}
	}
}

// TestOffline: no asset refers to another host, so the console works
// without network access (the SVG namespace is a name, not a fetch).
func TestOffline(t *testing.T) {
	files, err := load()
	if err != nil {
		t.Fatal(err)
	}
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	for name, a := range files {
		body := string(a.body)
		if name == "app.js" {
			// the SVG namespace app.js draws its charts in: a name, not a fetch
			body = strings.ReplaceAll(body, "'http://www.w3.org/2000/svg'", "")
		}
		for _, m := range url.FindAllString(body, -1) {
			if m == "http://www.w3.org" && strings.HasSuffix(name, ".svg") {
				continue
			}
			t.Errorf("%s refers to another host: %q", name, m)
		}
		if s := string(a.body); strings.Contains(s, "@import") || strings.Contains(s, "url(") {
			t.Errorf("%s loads a stylesheet or resource by url", name)
		}
	}
	if len(files) < 4 {
		t.Errorf("only %d assets embedded", len(files))
	}
}

// TestNoInlineScriptOrHTMLSinks guards the CSP and escaping rules in the
// source: no inline script, handler or style in the page, and no HTML
// sink in the script (every value is set as text).
func TestNoInlineScriptOrHTMLSinks(t *testing.T) {
	files, err := load()
	if err != nil {
		t.Fatal(err)
	}
	html := string(files["index.html"].body)
	if regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>[^<]+</script>`).MatchString(html) {
		t.Error("index.html has an inline script")
	}
	if m := regexp.MustCompile(`(?i)\son[a-z]+\s*=`).FindString(html); m != "" {
		t.Errorf("index.html has an inline event handler: %q", m)
	}
	if regexp.MustCompile(`(?i)\sstyle\s*=|<style`).MatchString(html) {
		t.Error("index.html has inline style (the CSP refuses it)")
	}
	js := string(files["app.js"].body)
	var code strings.Builder
	for _, line := range strings.Split(js, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "//") {
			continue
		}
		code.WriteString(line + "\n")
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setTimeout('", `setTimeout("`, "javascript:", "srcdoc", "createContextualFragment", "DOMParser"} {
		if strings.Contains(code.String(), sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
	// localStorage holds one display preference, the time zone, under its
	// own key, and nothing else (the token belongs in sessionStorage).
	rest := strings.NewReplacer("localStorage.getItem(TZ_KEY)", "", "localStorage.setItem(TZ_KEY, tz)", "").Replace(code.String())
	if strings.Contains(code.String(), "document.cookie") || strings.Contains(rest, "localStorage") {
		t.Error("app.js keeps state in cookies or localStorage; the token belongs in sessionStorage")
	}
	if !strings.Contains(code.String(), "credentials: 'omit'") {
		t.Error("app.js fetches without credentials: 'omit'")
	}
}
