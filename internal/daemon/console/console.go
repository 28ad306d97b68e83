package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is the path the daemon serves the console under.
const Prefix = "/ui/"

// ContentSecurityPolicy is sent with every console answer: everything
// from the page's own origin, no inline script, style or event handler,
// no plugins, no <base>, no form posts, no framing.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; " +
	"frame-ancestors 'none'"

// asset is one embedded file ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// contentTypes by extension: set here rather than from the system's MIME
// tables, which differ between machines.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".txt":  "text/plain; charset=utf-8",
}

// load reads every embedded asset once.
func load() (map[string]asset, error) {
	out := map[string]asset{}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return fmt.Errorf("console asset %s: no content type for its extension", p)
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[strings.TrimPrefix(p, "assets/")] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	return out, err
}

// Handler serves the console's assets for request paths under /ui/
// (/ui/ itself is index.html). The daemon mounts it with
// mux.Handle("GET /ui/", console.Handler()); it needs no token.
func Handler() http.Handler {
	files, err := load()
	if err != nil {
		// The assets are compiled in: this is a build defect, caught by
		// the package's tests.
		panic(err)
	}
	return &handler{files: files}
}

type handler struct {
	files map[string]asset
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if name == "" {
		name = "index.html"
	}
	a, ok := h.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd.Set("Content-Type", a.contentType)
	hd.Set("ETag", a.etag)
	// Revalidate every time: a new daemon version serves new assets at the
	// same names.
	hd.Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatch(match, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(a.body)
	}
}

// etagMatch reports whether an If-None-Match list names etag.
func etagMatch(list, etag string) bool {
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimPrefix(strings.TrimSpace(e), "W/")
		if e == etag || e == "*" {
			return true
		}
	}
	return false
}
