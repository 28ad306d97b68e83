package client_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/delayq/delayq/client"
)

// fakeDaemon answers like a delayq daemon for the examples (the package
// tests run against a real one).
func fakeDaemon() *httptest.Server { return httptest.NewServer(fakeHandler()) }

// fakeHandler is fakeDaemon's handler.
func fakeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		var t struct {
			ID    string `json:"id"`
			Delay string `json:"delay"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &t)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"state":"scheduled","outcome":"created","due_at":"2030-01-01T00:00:00.000Z","shard":3}`, t.ID)
	})
	mux.HandleFunc("DELETE /v1/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"code":"not_found","message":"task %s not found"}}`, r.PathValue("id"))
	})
	// A growth from 16 to 64 shards that is done at the second read.
	reads := 0
	mux.HandleFunc("PUT /v1/shards", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{"count":64,"previous":16,"state":"migrating","moved":0,"remaining":20000,"epoch":2}`)
	})
	mux.HandleFunc("GET /v1/shards", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if reads++; reads == 1 {
			fmt.Fprint(w, `{"count":64,"previous":16,"state":"migrating","moved":5000,"remaining":15000,"epoch":2}`)
			return
		}
		fmt.Fprint(w, `{"count":64,"previous":16,"state":"stable","moved":20000,"remaining":0,"epoch":2}`)
	})
	return mux
}

func Example() {
	srv := fakeDaemon() // in production: the daemon's address, e.g. http://127.0.0.1:7070
	defer srv.Close()
	ctx := context.Background()
	c := client.New(srv.URL, client.WithToken("secret"))

	res, err := c.Schedule(ctx, client.Task{
		ID:      "order-42-cancel",
		Type:    "order.cancel",
		Payload: json.RawMessage(`{"order":42}`),
		Delay:   24 * time.Hour,
	})
	if err != nil {
		fmt.Println("schedule:", err)
		return
	}
	fmt.Println(res.ID, res.State, res.Outcome, res.DueAt.Format(time.RFC3339))

	err = c.Cancel(ctx, "order-43-cancel")
	fmt.Println(errors.Is(err, client.ErrNotFound), err)
	// Output:
	// order-42-cancel scheduled created 2030-01-01T00:00:00Z
	// true delayq: 404 not_found: task order-43-cancel not found
}

func ExampleClient_GrowShards() {
	srv := fakeDaemon()
	defer srv.Close()
	ctx := context.Background()
	c := client.New(srv.URL, client.WithToken("secret"))

	m, err := c.GrowShards(ctx, 64) // a multiple of the current count, at most 4096
	if err != nil {
		fmt.Println("grow:", err) // e.g. 409 conflict while a growth runs
		return
	}
	for m.Migrating() {
		fmt.Printf("%d -> %d shards: %.0f%%\n", m.Previous, m.Count, 100*m.Progress())
		time.Sleep(10 * time.Millisecond) // dq shards grow --wait polls every 500ms
		if m, err = c.Shards(ctx); err != nil {
			fmt.Println("shards:", err)
			return
		}
	}
	fmt.Println(m.State, m.Count, "shards,", m.Moved, "tasks moved")
	// Output:
	// 16 -> 64 shards: 0%
	// 16 -> 64 shards: 25%
	// stable 64 shards, 20000 tasks moved
}

// A daemon on HTTPS (DQ_HTTP_TLS_CERT) with a certificate of a private CA:
// the client trusts that CA with WithCA.
func ExampleWithCA() {
	srv := httptest.NewUnstartedServer(fakeHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // quiet about the refused handshake below
	srv.StartTLS()                                   // in production: e.g. https://delayq.internal:7070
	defer srv.Close()
	pool := x509.NewCertPool() // in production: the CA file, e.g. read with os.ReadFile and AppendCertsFromPEM
	pool.AddCert(srv.Certificate())
	ctx := context.Background()
	c := client.New(srv.URL, client.WithToken("secret"), client.WithCA(pool))

	res, err := c.Schedule(ctx, client.Task{ID: "order-44-cancel", Type: "order.cancel", Delay: time.Hour})
	fmt.Println(res.ID, res.State, err)

	_, err = client.New(srv.URL).Schedule(ctx, client.Task{Type: "order.cancel"}) // the system's roots only
	var unknown x509.UnknownAuthorityError
	fmt.Println(errors.As(err, &unknown))
	// Output:
	// order-44-cancel scheduled <nil>
	// true
}
