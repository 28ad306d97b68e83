package admin

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// A connection that never sent a request (a client's spare, parked unused)
// does not hold a graceful shutdown until its timeout, while a request in
// flight is still answered.
func TestShutdownClosesConnectionsWithoutARequest(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	s, err := Listen("127.0.0.1:0", h, slog.New(slog.DiscardHandler), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	spare, err := net.Dial("tcp", s.Addr()) // connected, no request
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Close()
	slow := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/slow")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		slow <- err
	}()
	time.Sleep(100 * time.Millisecond) // both connections accepted
	t0 := time.Now()
	cancel()
	time.Sleep(400 * time.Millisecond) // beyond freshGrace: the spare is closed meanwhile
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("the request in flight at shutdown: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if el := time.Since(t0); el > 2*time.Second {
			t.Errorf("shutdown took %v", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	_ = spare.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := spare.Read(make([]byte, 1)); err == nil {
		t.Error("the spare connection is still open")
	}
}
