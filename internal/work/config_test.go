package work

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/config"
)

func parse(t *testing.T, args []string, env map[string]string) (Config, error) {
	t.Helper()
	var c Config
	b := config.NewBinder("work")
	c.Bind(b)
	if err := b.Parse(args, func(k string) string { return env[k] }, io.Discard); err != nil {
		return c, err
	}
	return c, c.Load()
}

func TestConfigDefaultsAndEnv(t *testing.T) {
	c, err := parse(t, nil, map[string]string{"DQ_WEBHOOK_URL": "http://sink/x"})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":7072" || c.Group != "delayq-work" || c.Topics[0] != "dq.tasks" || c.DeadTopic != "dq.dead" ||
		c.Concurrency != 16 || c.DefaultTimeout != 30*time.Second || c.BackoffMin != time.Second ||
		c.BackoffMax != 10*time.Minute || c.MaxPayload != 1<<20 || c.Brokers[0] != "127.0.0.1:9092" ||
		len(c.EtcdEndpoints) != 1 || c.EtcdEndpoints[0] != "127.0.0.1:2379" || c.MaxTypes != 100 || c.MaxHeld != 0 || c.MaxHeldBytes != 64<<20 {
		t.Errorf("defaults: %+v", c)
	}
	c, err = parse(t, []string{"-etcd-endpoints", ""}, map[string]string{"DQ_WEBHOOK_URL": "http://sink/x", "DQ_ETCD_ENDPOINTS": "e:1"})
	if err != nil || len(c.EtcdEndpoints) != 0 {
		t.Errorf("-etcd-endpoints \"\" must turn rate limits off: %v %v", c.EtcdEndpoints, err)
	}
	c, err = parse(t, []string{"-concurrency", "4"}, map[string]string{
		"DQ_WEBHOOK_URL": "http://sink/x", "DQ_KAFKA_BROKERS": "a:1,b:2", "DQ_GROUP": "g", "DQ_TOPICS": "t1, t2",
		"DQ_DEAD_TOPIC": "d", "DQ_WORK_CONCURRENCY": "99", "DQ_DEFAULT_TIMEOUT": "2s", "DQ_BACKOFF_MIN": "10ms",
		"DQ_BACKOFF_MAX": "1s", "DQ_WEBHOOK_SECRET": "s", "DQ_MAX_PAYLOAD": "1000", "DQ_ETCD_ENDPOINTS": "e1:1, e2:2",
		"DQ_METRICS_MAX_TYPES": "7", "DQ_WORK_MAX_HELD": "500", "DQ_WORK_MAX_HELD_BYTES": "8MiB",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Concurrency != 4 || len(c.Brokers) != 2 || c.Group != "g" || len(c.Topics) != 2 || c.Topics[1] != "t2" ||
		c.DeadTopic != "d" || c.DefaultTimeout != 2*time.Second || c.BackoffMin != 10*time.Millisecond ||
		c.BackoffMax != time.Second || c.WebhookSecret != "s" || c.MaxPayload != 1000 ||
		len(c.EtcdEndpoints) != 2 || c.EtcdEndpoints[1] != "e2:2" || c.MaxTypes != 7 || c.MaxHeld != 500 || c.MaxHeldBytes != 8<<20 {
		t.Errorf("from env and flags: %+v", c)
	}
}

func TestConfigRefusesToStartWithoutHandlers(t *testing.T) {
	err := Run(t.Context(), nil, func(string) string { return "" }, io.Discard)
	if !errors.Is(err, ErrNoHandlers) {
		t.Fatalf("err %v, want ErrNoHandlers", err)
	}
	if !strings.Contains(err.Error(), "DQ_WEBHOOK_URL") {
		t.Errorf("message does not say what to set: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DQ_WEBHOOK_URL": "ftp://x"}, "webhook-url"},
		{map[string]string{"DQ_WEBHOOK_URL": "http://x", "DQ_WORK_CONCURRENCY": "0"}, "concurrency"},
		{map[string]string{"DQ_WEBHOOK_URL": "http://x", "DQ_WORK_CONCURRENCY": "32", "DQ_WORK_MAX_HELD": "16"}, "max-held"},
		{map[string]string{"DQ_WEBHOOK_URL": "http://x", "DQ_WORK_MAX_HELD": "-1"}, "max-held"},
		{map[string]string{"DQ_WEBHOOK_URL": "http://x", "DQ_WORK_MAX_HELD_BYTES": "1000"}, "max-held-bytes"},
		{map[string]string{"DQ_WEBHOOK_URL": "http://x", "DQ_BACKOFF_MIN": "2m", "DQ_BACKOFF_MAX": "1m"}, "backoff"},
		{map[string]string{"DQ_WEBHOOK_URL": "http://x", "DQ_DEFAULT_TIMEOUT": "soon"}, "DQ_DEFAULT_TIMEOUT"},
		{map[string]string{"DQ_WEBHOOK_URL": "http://x", "DQ_KAFKA_HEARTBEAT": "20s"}, "heartbeat"},
		{map[string]string{"DQ_WEBHOOK_URL": "http://x", "DQ_METRICS_MAX_TYPES": "0"}, "metrics-max-types"},
		{map[string]string{"DQ_WEBHOOK_URL": "http://x", "DQ_NAMESPACE": "a:b"}, "namespace"},
		{map[string]string{"DQ_WORK_CONFIG": "/does/not/exist.json"}, "no such file"},
	} {
		_, err := parse(t, nil, c.env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want it to mention %q", c.env, err, c.want)
		}
	}
}

func TestWorkConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "work.json")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := parse(t, nil, map[string]string{"DQ_WORK_CONFIG": write(`{"webhooks": {
		"order.cancel": {"url": "https://orders/cancel", "timeout": "5s"},
		"push.send": {"url": "http://push:8080/send"}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Webhooks) != 2 || c.Webhooks["order.cancel"].Timeout != 5*time.Second || c.Webhooks["push.send"].URL != "http://push:8080/send" {
		t.Errorf("webhooks %+v", c.Webhooks)
	}
	for _, bad := range []struct{ file, want string }{
		{`{"webhooks": {"a": {"url": "http://x", "timeuot": "5s"}}}`, "unknown field"},
		{`{"webhooks": {"a": {"url": "http://x", "timeout": "5"}}}`, "timeout"},
		{`{"webhooks": {"a": {"url": "http://x", "timeout": "-1s"}}}`, "timeout"},
		{`{"webhooks": {"a": {}}}`, "url is required"},
		{`{"webhooks": {"a": {"url": "mailto:x@y"}}}`, `type "a"`},
		{`{"webhooks": `, "unexpected EOF"},
		{`{"hookz": {}}`, "unknown field"},
		{`{"webhooks": {}}`, "no handlers"},
	} {
		_, err := parse(t, nil, map[string]string{"DQ_WORK_CONFIG": write(bad.file)})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want %q", bad.file, err, bad.want)
		}
	}
}
