//go:build !dqslim

package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delayq/delayq/internal/testenv"
)

// TestKafkaAdvertisesAnotherAddress: kfake has no advertised-address
// option; StartKafka's ListenFn makes it listen on one address and
// announce another, and clients follow the announced one.
func TestKafkaAdvertisesAnotherAddress(t *testing.T) {
	// Listen on every interface, announce 127.0.0.2 (loopback on Linux
	// too, so the client can follow it).
	c, err := StartKafka(KafkaOptions{Listen: "0.0.0.0:0", Advertise: "127.0.0.2", Topics: []string{"t1"}, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adv := c.Advertised
	if !strings.HasPrefix(adv, "127.0.0.2:") {
		t.Fatalf("advertised %q, want 127.0.0.2:<port>", adv)
	}
	port := strings.TrimPrefix(adv, "127.0.0.2:")
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:"+port), kgo.DefaultProduceTopic("t1"),
		kgo.ConsumeTopics("t1"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Brokers) != 1 || meta.Brokers[0].Host != "127.0.0.2" || meta.Brokers[0].Port != mustAtoi(t, port) {
		t.Fatalf("metadata brokers %+v, want 127.0.0.2:%s", meta.Brokers, port)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("via the advertised address")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	fs := cl.PollFetches(ctx)
	if errs := fs.Errors(); len(errs) > 0 {
		t.Fatalf("fetch: %v", errs)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "via the advertised address" {
		t.Fatalf("consumed %d records", len(recs))
	}

	// An unspecified listen host is announced as this machine's address.
	c2, err := StartKafka(KafkaOptions{Listen: "0.0.0.0:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	adv2 := c2.Advertised
	if host := strings.Split(adv2, ":")[0]; host == "0.0.0.0" || host != advertiseHost("0.0.0.0") {
		t.Errorf("listen 0.0.0.0 advertised %q, want this machine's address %s", adv2, advertiseHost("0.0.0.0"))
	}
}

func mustAtoi(t *testing.T, s string) int32 {
	t.Helper()
	var n int32
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = n*10 + int32(c-'0')
	}
	return n
}

// TestDevEtcd: the embedded etcd serves clients and announces the
// advertised URL; its data survives a restart on the same directory.
func TestDevEtcd(t *testing.T) {
	dir := t.TempDir()
	start := func() (string, func()) {
		srv, err := StartEtcd(t.Context(), EtcdOptions{Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:0", Advertise: "http://etcd.example:2379", DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return srv.Config().ListenClientUrls[0].String(), srv.Close
	}
	url, stop := start()
	resp, err := http.Get(url + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Post(url+"/v3/kv/put", "application/json", strings.NewReader(`{"key":"a2V5","value":"dmFsdWU="}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Post(url+"/v3/cluster/member/list", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var members struct {
		Members []struct {
			ClientURLs []string `json:"clientURLs"`
		} `json:"members"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&members)
	resp.Body.Close()
	if len(members.Members) != 1 || !slices.Equal(members.Members[0].ClientURLs, []string{"http://etcd.example:2379"}) {
		t.Errorf("members %+v, want one advertising http://etcd.example:2379", members)
	}
	stop()

	url, stop = start()
	defer stop()
	resp, err = http.Post(url+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"a2V5"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "dmFsdWU=") {
		t.Errorf("after restart: %s, want the value written before", b)
	}
}

// TestHealthKafka: dq health --kafka asks a real broker for its API
// versions.
func TestHealthKafka(t *testing.T) {
	k := testenv.StartKafka(t)
	if out, _, err := runDQ(t, nil, "health", "--kafka", k.Brokers[0]); err != nil || !strings.Contains(out, "healthy") {
		t.Errorf("kafka: %q, %v", out, err)
	}
	port, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := runDQ(t, nil, "health", "--kafka", port, "--timeout", "500ms"); err == nil {
		t.Errorf("kafka probe of a closed port: no error")
	}
}
