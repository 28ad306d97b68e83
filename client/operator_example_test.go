package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/delayq/delayq/client"
)

// fakeOperator answers the operator API like a delayq daemon for the
// examples (the package tests run against a real one).
func fakeOperator() *httptest.Server {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}
	// Three dead tasks of email.send, two a page.
	mux.HandleFunc("GET /v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("cursor") == "" {
			answer(w, `{"tasks":[`+
				`{"id":"mail-1","type":"email.send","state":"dead","attempt":10,"shard":2,"last_error":"smtp: 550 no such user","died_at":"2030-01-01T10:00:00Z"},`+
				`{"id":"mail-7","type":"email.send","state":"dead","attempt":10,"shard":2,"last_error":"smtp: timeout","died_at":"2030-01-01T10:05:00Z"}],`+
				`"next_cursor":"c1"}`)
			return
		}
		answer(w, `{"tasks":[{"id":"mail-3","type":"email.send","state":"dead","attempt":10,"shard":9,"last_error":"smtp: timeout","died_at":"2030-01-01T09:00:00Z"}]}`)
	})
	// A redrive by type done in two bounded requests.
	redrives := 0
	mux.HandleFunc("POST /v1/dead/redrive", func(w http.ResponseWriter, _ *http.Request) {
		if redrives++; redrives == 1 {
			answer(w, `{"changed":2,"more":true}`)
			return
		}
		answer(w, `{"changed":1,"more":false}`)
	})
	mux.HandleFunc("POST /v1/types/{type}/pause", func(w http.ResponseWriter, r *http.Request) {
		answer(w, fmt.Sprintf(`{"type":%q,"paused":true,"changed":true}`, r.PathValue("type")))
	})
	mux.HandleFunc("POST /v1/types/{type}/resume", func(w http.ResponseWriter, r *http.Request) {
		answer(w, fmt.Sprintf(`{"type":%q,"paused":false,"changed":true,"resumed":42}`, r.PathValue("type")))
	})
	mux.HandleFunc("GET /v1/types", func(w http.ResponseWriter, _ *http.Request) {
		answer(w, `{"types":[{"type":"email.send","paused":true,"paused_at":"2030-01-01T10:00:00Z","parked":42,"limit":{"token_bucket":{"rate":50,"burst":100}}},`+
			`{"type":"order.cancel","paused":false,"parked":0}]}`)
	})
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, _ *http.Request) {
		answer(w, `{"namespace":"prod","shard_count":2,"shards":[`+
			`{"shard":0,"leader":{"id":"event-a","addr":"10.0.0.5:9091"},"leader_token":7,"pending":1200,"overdue":3,"oldest_overdue_seconds":1.5,"paused":0,"firing":4,"dead":0},`+
			`{"shard":1,"leader":null,"leader_token":6,"pending":900,"overdue":900,"oldest_overdue_seconds":95,"paused":0,"firing":0,"dead":2}],`+
			`"processes":[{"id":"event-a","kind":"event","version":"v1.4.0","addr":"10.0.0.5:9091","ready":true,"reason":"","started_at":"2030-01-01T08:00:00Z"},`+
			`{"id":"work-b","kind":"work","version":"v1.4.0","addr":"10.0.0.6:9092","ready":false,"reason":"kafka: dial tcp 10.0.0.9:9092: connection refused","started_at":"2030-01-01T08:00:01Z"}],`+
			`"journal_depth":0,"redis_up":true}`)
	})
	return httptest.NewServer(mux)
}

// Walk every dead task of a type, page after page, then redrive them all.
func ExampleClient_Tasks() {
	srv := fakeOperator() // in production: the daemon's address
	defer srv.Close()
	ctx := context.Background()
	c := client.New(srv.URL, client.WithToken("secret"))

	for t, err := range c.Tasks(ctx, client.ListOptions{State: client.StateDead, Type: "email.send", Limit: 2}) {
		if err != nil {
			fmt.Println("list:", err)
			return
		}
		fmt.Println(t.ID, t.DiedAt.Format(time.RFC3339), t.LastError)
	}
	n, err := c.RedriveDeadTasks(ctx, client.Selection{Type: "email.send"})
	fmt.Println("redriven:", n, err)
	// Output:
	// mail-1 2030-01-01T10:00:00Z smtp: 550 no such user
	// mail-7 2030-01-01T10:05:00Z smtp: timeout
	// mail-3 2030-01-01T09:00:00Z smtp: timeout
	// redriven: 3 <nil>
}

// Stop a type's tasks from running while its downstream is down, then let
// them run.
func ExampleClient_PauseType() {
	srv := fakeOperator()
	defer srv.Close()
	ctx := context.Background()
	c := client.New(srv.URL, client.WithToken("secret"))

	s, err := c.PauseType(ctx, "email.send")
	if err != nil {
		fmt.Println("pause:", err) // 503 unavailable: the daemon has no etcd
		return
	}
	fmt.Println(s.Type, "paused:", s.Paused, "changed:", s.Changed)

	types, err := c.Types(ctx)
	if err != nil {
		fmt.Println("types:", err)
		return
	}
	for _, t := range types {
		fmt.Println(t.Type, t.Paused, t.Parked, t.Limit != nil)
	}

	s, err = c.ResumeType(ctx, "email.send")
	if err != nil {
		fmt.Println("resume:", err)
		return
	}
	fmt.Println(s.Type, "paused:", s.Paused, "resumed:", s.Resumed)
	// Output:
	// email.send paused: true changed: true
	// email.send true 42 true
	// order.cancel false 0 false
	// email.send paused: false resumed: 42
}

// Find shards without a leader or with a growing backlog, and processes
// that are not ready.
func ExampleClient_Cluster() {
	srv := fakeOperator()
	defer srv.Close()
	c := client.New(srv.URL, client.WithToken("secret"))

	cl, err := c.Cluster(context.Background())
	if err != nil {
		fmt.Println("cluster:", err)
		return
	}
	for _, s := range cl.Shards {
		if s.Leader == nil {
			fmt.Printf("shard %d: no leader, %d overdue, the oldest by %s\n", s.Shard, s.Overdue, s.OldestOverdue())
		} else {
			fmt.Printf("shard %d: led by %s, %d pending\n", s.Shard, s.Leader.ID, s.Pending)
		}
	}
	for _, p := range cl.Processes {
		if !p.Ready {
			fmt.Printf("%s %s not ready: %s\n", p.Kind, p.ID, p.Reason)
		}
	}
	// Output:
	// shard 0: led by event-a, 1200 pending
	// shard 1: no leader, 900 overdue, the oldest by 1m35s
	// work work-b not ready: kafka: dial tcp 10.0.0.9:9092: connection refused
}
