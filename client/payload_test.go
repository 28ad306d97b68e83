package client_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/client"
)

// A struct as a task's payload.
func ExampleJSONPayload() {
	type order struct {
		ID   string `json:"id"`
		Note string `json:"note"`
	}
	payload, err := client.JSONPayload(order{ID: "42", Note: "fish & chips"})
	if err != nil {
		panic(err)
	}
	t := client.Task{ID: "order-42", Type: "order.cancel", Delay: 10 * time.Minute, Payload: payload}
	fmt.Println(string(t.Payload))
	// Output: {"id":"42","note":"fish & chips"}
}

func TestJSONPayload(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{map[string]any{"a": []int{1, 2}, "b": "<x>&"}, `{"a":[1,2],"b":"<x>&"}`},
		{nil, `null`},
		{"text", `"text"`},
		{json.RawMessage(`{"as":"is"}`), `{"as":"is"}`},
	} {
		got, err := client.JSONPayload(tc.v)
		if err != nil || string(got) != tc.want || !json.Valid(got) {
			t.Errorf("JSONPayload(%v) = %s, %v; want %s", tc.v, got, err, tc.want)
		}
	}
	for _, v := range []any{math.Inf(1), make(chan int), func() {}} {
		if _, err := client.JSONPayload(v); err == nil || !strings.HasPrefix(err.Error(), "delayq: payload: ") {
			t.Errorf("JSONPayload(%T): %v, want a delayq: payload: error", v, err)
		}
	}
}

// A payload from JSONPayload goes through a real daemon and comes back
// byte for byte (GET /v1/tasks/{id}), and decodes into what was encoded.
func TestJSONPayloadThroughTheDaemon(t *testing.T) {
	url, _ := startDaemon(t, "")
	c := client.New(url)
	type order struct {
		ID    string   `json:"id"`
		Note  string   `json:"note"`
		Items []string `json:"items"`
	}
	want := order{ID: "42", Note: "fish & chips <hot>", Items: []string{"cod", "peas"}}
	payload, err := client.JSONPayload(want)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(t.Context(), client.Task{ID: "order-42", Type: "order.cancel", Delay: time.Hour, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	info, err := c.Get(t.Context(), "order-42")
	if err != nil {
		t.Fatal(err)
	}
	if string(info.Payload) != string(payload) {
		t.Errorf("payload %s, want %s as sent", info.Payload, payload)
	}
	var got order
	if err := json.Unmarshal(info.Payload, &got); err != nil || got.Note != want.Note || len(got.Items) != 2 {
		t.Errorf("decoded %+v (%v), want %+v", got, err, want)
	}
}
