package embedded

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
)

// transport serves the Client's requests with the daemon's handler in
// this process: no socket, no connection pool. A request is answered once
// the handler returned (nothing of the API streams).
type transport struct{ p *Producer }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.p.enter() {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, ErrClosed
	}
	defer t.p.exit()
	in := req.Clone(req.Context())
	if in.Body == nil {
		in.Body = http.NoBody
	}
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "embedded"
	w := &answer{header: http.Header{}}
	t.p.app.Handler().ServeHTTP(w, in)
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.header.Set("Content-Length", strconv.Itoa(w.body.Len()))
	return &http.Response{
		Status: strconv.Itoa(w.code) + " " + http.StatusText(w.code), StatusCode: w.code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.header, Body: io.NopCloser(&w.body), ContentLength: int64(w.body.Len()), Request: req,
	}, nil
}

// answer is the ResponseWriter the handler writes to.
type answer struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (a *answer) Header() http.Header { return a.header }

func (a *answer) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}

func (a *answer) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	return a.body.Write(b)
}
