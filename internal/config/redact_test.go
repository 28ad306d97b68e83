package config

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://hooks.example.com/x", "https://hooks.example.com/x"},
		{"https://bob:hunter2@hooks.example.com/x", "https://bob:xxxxx@hooks.example.com/x"},
		{"https://bob@hooks.example.com/x", "https://bob@hooks.example.com/x"},
		{"https://h/x?token=abc&page=2", "https://h/x?token=xxxxx&page=2"},
		{"https://h/x?page=2&Access_Token=abc&api_key=k&apikey=k&key=k&secret=s&password=p&pass=p&sig=s&signature=s&auth=a",
			"https://h/x?page=2&Access_Token=xxxxx&api_key=xxxxx&apikey=xxxxx&key=xxxxx&secret=xxxxx&password=xxxxx&pass=xxxxx&sig=xxxxx&signature=xxxxx&auth=xxxxx"},
		{"https://h/x?client_secret=s&x-api-key=k&monkey=ok", "https://h/x?client_secret=xxxxx&x-api-key=xxxxx&monkey=ok"},
		{"https://h/cb#access_token=abc&state=1", "https://h/cb#access_token=xxxxx&state=1"},
		{"redis://:pw@10.0.0.1:6379/0", "redis://:xxxxx@10.0.0.1:6379/0"},
		{"user:pw@10.0.0.1:6379", "user:xxxxx@10.0.0.1:6379"},
		{"10.0.0.1:6379", "10.0.0.1:6379"},
		{"http://a:b@h/%zz?token=t", "http://a:xxxxx@h/%zz?token=t"}, // not a URL Go parses: user info still redacted
		{"", ""},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	in := `{"emails":{"url":"https://u:p4ss@h/hook?token=t0k"}}`
	if got := Redact(in); strings.Contains(got, "p4ss") || strings.Contains(got, "t0k") || !strings.Contains(got, `"url":"https://u:xxxxx@h/hook?token=xxxxx"`) {
		t.Errorf("Redact(%s) = %s", in, got)
	}
}

// TestLogAttrsRedactsURLs checks the start-up line as it is written: no
// password, token or key of any URL or address setting reaches the log.
func TestLogAttrsRedactsURLs(t *testing.T) {
	var c Common
	var hook, workCfg string
	var brokers []string
	b := NewBinder("test")
	c.BindCommon(b, ":1")
	b.String(&hook, "webhook-url", "DQ_WEBHOOK_URL", "", "")
	b.String(&workCfg, "work-config", "DQ_WORK_CONFIG", "", "")
	b.List(&brokers, "kafka-brokers", "DQ_KAFKA_BROKERS", "127.0.0.1:9092", "")
	env := map[string]string{
		"DQ_WEBHOOK_URL":   "https://ops:s3cr3tpw@hooks.example.com/dq?token=t0k3n&team=ops",
		"DQ_WORK_CONFIG":   `{"webhooks":{"mail":{"url":"https://hooks.example.com/mail?api_key=k3y"}}}`,
		"DQ_REDIS_ADDRS":   "rediss://default:r3dispw@10.0.0.1:6380,10.0.0.2:6379",
		"DQ_KAFKA_BROKERS": "alice:k4fkapw@b1:9092",
	}
	if err := b.Parse(nil, func(k string) string { return env[k] }, nil); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		slog.New(h).Info("starting", b.LogAttrs()...)
	}
	out := buf.String()
	for _, secret := range []string{"s3cr3tpw", "t0k3n", "k3y", "r3dispw", "k4fkapw"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q logged:\n%s", secret, out)
		}
	}
	for _, kept := range []string{"https://ops:xxxxx@hooks.example.com/dq?token=xxxxx\u0026team=ops", "api_key=xxxxx", "rediss://default:xxxxx@10.0.0.1:6380,10.0.0.2:6379", "alice:xxxxx@b1:9092"} {
		if !strings.Contains(out, kept) && !strings.Contains(out, strings.ReplaceAll(kept, "\u0026", `\u0026`)) {
			t.Errorf("want %q in the log:\n%s", kept, out)
		}
	}
}
