package pause

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv"
)

func TestPauseResumeIdempotent(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)

	before := time.Now()
	changed, err := Pause(ctx, cli, ns, "mail")
	if err != nil || !changed {
		t.Fatalf("first Pause: %v %v", changed, err)
	}
	raw, err := cli.Get(ctx, "/"+ns+"/paused/mail")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("stored key: %v %v", raw, err)
	}
	var v struct {
		PausedAt string `json:"paused_at"`
	}
	if err := json.Unmarshal(raw.Kvs[0].Value, &v); err != nil {
		t.Fatalf("stored value %q: %v", raw.Kvs[0].Value, err)
	}
	at, err := time.Parse(time.RFC3339Nano, v.PausedAt)
	if err != nil || at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("paused_at %q: %v", v.PausedAt, err)
	}
	modRev := raw.Kvs[0].ModRevision

	// again: nothing changes, paused_at is kept
	if changed, err := Pause(ctx, cli, ns, "mail"); err != nil || changed {
		t.Fatalf("second Pause: %v %v", changed, err)
	}
	if raw, err := cli.Get(ctx, "/"+ns+"/paused/mail"); err != nil || raw.Kvs[0].ModRevision != modRev {
		t.Fatalf("second Pause rewrote the key: %v %v", raw, err)
	}
	if _, err := Pause(ctx, cli, ns, "sms"); err != nil {
		t.Fatal(err)
	}
	m, err := List(ctx, cli, ns)
	if err != nil || len(m) != 2 || !m["mail"].Equal(at) || m["sms"].IsZero() {
		t.Fatalf("List: %v %v", m, err)
	}
	// another namespace is separate
	if m, err := List(ctx, cli, ns+"x"); err != nil || len(m) != 0 {
		t.Fatalf("List of another namespace: %v %v", m, err)
	}

	if changed, err := Resume(ctx, cli, ns, "mail"); err != nil || !changed {
		t.Fatalf("Resume: %v %v", changed, err)
	}
	if changed, err := Resume(ctx, cli, ns, "mail"); err != nil || changed {
		t.Fatalf("second Resume: %v %v", changed, err)
	}
	if changed, err := Resume(ctx, cli, ns, "never-paused"); err != nil || changed {
		t.Fatalf("Resume of a running type: %v %v", changed, err)
	}
	if m, err := List(ctx, cli, ns); err != nil || len(m) != 1 || m["sms"].IsZero() {
		t.Fatalf("List after Resume: %v %v", m, err)
	}
}

// Hostile type names are refused with ErrInvalidType and write nothing.
func TestPauseRejectsBadTypes(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)
	for name, typ := range map[string]string{
		"empty":    "",
		"slash":    "a/b",
		"dotdot":   "../x",
		"space":    "a b",
		"newline":  "a\nb",
		"control":  "a\x00b",
		"invalid":  "a\xffb",
		"too long": strings.Repeat("x", task.MaxTypeLen+1),
		"tab":      "a\tb",
	} {
		if _, err := Pause(ctx, cli, ns, typ); !errors.Is(err, ErrInvalidType) {
			t.Errorf("Pause(%s): %v, want ErrInvalidType", name, err)
		}
		if _, err := Resume(ctx, cli, ns, typ); !errors.Is(err, ErrInvalidType) {
			t.Errorf("Resume(%s): %v, want ErrInvalidType", name, err)
		}
	}
	if err := ValidateType(strings.Repeat("é", task.MaxTypeLen/2)); err != nil {
		t.Errorf("a type of MaxTypeLen bytes: %v", err)
	}
	resp, err := cli.Get(ctx, "/"+ns+"/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("refused calls wrote %v (%v)", resp.Kvs, err)
	}
	// a bad namespace is an error, but not bad input about the type
	for _, bad := range []string{"", "a/b"} {
		if _, err := Pause(ctx, cli, bad, "mail"); err == nil || errors.Is(err, ErrInvalidType) {
			t.Errorf("Pause in namespace %q: %v", bad, err)
		}
		if _, err := List(ctx, cli, bad); err == nil {
			t.Errorf("List of namespace %q succeeded", bad)
		}
		if _, err := NewWatcher(cli, bad, nil); err == nil {
			t.Errorf("NewWatcher of namespace %q succeeded", bad)
		}
	}
}

// Keys not written by Pause: a value that does not decode still means
// paused; a key naming no valid type is left out.
func TestListForeignKeys(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)
	for k, v := range map[string]string{"junk": "not json", "a/b": `{}`, "a b": `{}`} {
		if _, err := cli.Put(ctx, Key(ns, k), v); err != nil {
			t.Fatal(err)
		}
	}
	m, err := List(ctx, cli, ns)
	if err != nil || len(m) != 1 {
		t.Fatalf("List: %v %v", m, err)
	}
	if at, ok := m["junk"]; !ok || !at.IsZero() {
		t.Fatalf("undecodable value: %v %v", at, ok)
	}
}

// An etcd that is down is an error (never ErrInvalidType).
func TestPauseEtcdDown(t *testing.T) {
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	e.Stop(t)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := Pause(ctx, cli, testNS(t), "mail"); err == nil || errors.Is(err, ErrInvalidType) {
		t.Fatalf("Pause with etcd down: %v", err)
	}
}

// TestPauseOfDotTypes: "." and ".." cannot be paused anew (no URL carries
// them as /v1/types/{type}/pause), but a pause stored before keeps
// applying (List) and can be lifted (Resume).
func TestPauseOfDotTypes(t *testing.T) {
	cli := testenv.StartEtcd(t).Client(t)
	ctx := t.Context()
	ns := testNS(t)
	for _, typ := range []string{".", ".."} {
		if _, err := Pause(ctx, cli, ns, typ); !errors.Is(err, ErrInvalidType) {
			t.Fatalf("Pause(%q) = %v, want ErrInvalidType", typ, err)
		}
		if _, err := cli.Put(ctx, Key(ns, typ), `{"paused_at":"2026-01-02T03:04:05Z"}`); err != nil {
			t.Fatal(err)
		}
	}
	paused, err := List(ctx, cli, ns)
	if err != nil || len(paused) != 2 || paused["."].IsZero() || paused[".."].IsZero() {
		t.Fatalf("List = %v, %v; want the stored pauses of . and ..", paused, err)
	}
	for _, typ := range []string{".", ".."} {
		if changed, err := Resume(ctx, cli, ns, typ); err != nil || !changed {
			t.Fatalf("Resume(%q) = %v, %v", typ, changed, err)
		}
	}
}
