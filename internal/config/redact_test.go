package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
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
		{"http://a:b@h/%zz?token=t&page=2#code=c", "http://a:xxxxx@h/%zz?token=xxxxx&page=2#code=xxxxx"}, // not a URL Go parses: still redacted
		{"http://h/%zz#sig=s", "http://h/%zz#sig=xxxxx"},
		{"http://h/%zz", "http://h/%zz"},
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

// Every name of secretParams is redacted, as is, in another case and
// with a prefix ending in '_' or '-'; names that only contain one are
// kept.
func TestRedactSecretParams(t *testing.T) {
	for _, c := range []struct {
		name string
		want bool
	}{
		{"token", true}, {"access_token", true}, {"refresh_token", true}, {"id_token", true},
		{"code", true}, {"auth_code", true}, {"Code", true},
		{"signature", true}, {"X-Amz-Signature", true}, {"sig", true},
		{"session", true}, {"sessionid", true}, {"session_id", true}, {"php-session", true},
		{"credential", true}, {"credentials", true}, {"X-Amz-Credential", true},
		{"jwt", true}, {"assertion", true}, {"private_key", true}, {"privatekey", true},
		{"client_secret", true}, {"secret", true}, {"password", true}, {"passwd", true}, {"pwd", true},
		{"api_key", true}, {"apikey", true}, {"x-api-key", true}, {"key", true},
		{"auth", true}, {"authorization", true}, {"bearer", true}, {"hmac", true}, {"otp", true},
		{"page", false}, {"team", false}, {"monkey", false}, {"codec", false}, {"sessions_page", false},
		{"keyword", false}, {"state", false},
	} {
		in := "https://h/x?" + c.name + "=v4lue&page=2"
		got := RedactURL(in)
		if redacted := !strings.Contains(got, "v4lue"); redacted != c.want {
			t.Errorf("RedactURL(%q) = %q, want redacted %v", in, got, c.want)
		}
		if !strings.Contains(got, "page=2") {
			t.Errorf("RedactURL(%q) = %q: page=2 lost", in, got)
		}
	}
}

// RedactError redacts the URL of every *url.Error in the chain, keeping
// the chain: net/http masks only the password.
func TestRedactError(t *testing.T) {
	raw := "http://alice:pw1@127.0.0.1:1/hook?token=t0k&code=c0de&team=ops"
	_, perr := url.Parse(strings.Replace(raw, "/hook", "/%zz", 1)) // a bad escape: url.Parse's error holds the URL
	if perr == nil {
		t.Fatal("url.Parse took a bad escape")
	}
	for _, c := range []struct {
		err   error
		chain bool // wraps io.ErrUnexpectedEOF
	}{
		{&url.Error{Op: "Post", URL: raw, Err: io.ErrUnexpectedEOF}, true},
		{&url.Error{Op: "Get", URL: raw, Err: &url.Error{Op: "Post", URL: raw, Err: io.ErrUnexpectedEOF}}, true},
		{perr, false},
	} {
		got := RedactError(c.err)
		msg := got.Error()
		for _, s := range []string{"pw1", "t0k", "c0de"} {
			if strings.Contains(msg, s) {
				t.Errorf("%q: %s left in", msg, s)
			}
		}
		if !strings.Contains(msg, "team=ops") || (c.chain && !errors.Is(got, io.ErrUnexpectedEOF)) {
			t.Errorf("%q: the chain or the rest of the URL lost", msg)
		}
	}
	// wrapped as it comes: the wrapper's message is redacted too
	wrapped := fmt.Errorf("webhook: %w", RedactError(&url.Error{Op: "Post", URL: raw, Err: io.ErrUnexpectedEOF}))
	if strings.Contains(wrapped.Error(), "t0k") {
		t.Errorf("%q: token left in", wrapped)
	}
	if RedactError(nil) != nil || RedactError(io.EOF) != io.EOF { //nolint:errorlint // identity: the error comes back as it was
		t.Error("RedactError changed an error without a URL")
	}
}

// Credentials in an address are refused, naming the setting, with the
// address redacted in the error: a client would show them in every
// connection error (go-redis: "dial tcp: address default:pw@h:6379: too
// many colons in address").
func TestCheckAddrs(t *testing.T) {
	for _, ok := range [][]string{nil, {"127.0.0.1:6379", "[::1]:6380", "redis-0.redis:6379"},
		{"https://etcd-0:2379", "http://10.0.0.1:2379"}, {"/run/redis.sock"}} {
		if err := CheckAddrs("redis-addrs", "DQ_REDIS_ADDRS", "DQ_REDIS_PASSWORD", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range [][]string{{"127.0.0.1:6379", "default:s3cr3t@10.0.0.1:6379"}, {"alice:s3cr3t@b1:9092"},
		{"https://root:s3cr3t@etcd-0:2379"}, {"rediss://default:s3cr3t@10.0.0.1:6380"}, {"user@h:1"}, {"http://u:s3cr3t@h/%zz"}} {
		err := CheckAddrs("kafka-brokers", "DQ_KAFKA_BROKERS", "DQ_KAFKA_SASL_USERNAME and DQ_KAFKA_SASL_PASSWORD", bad)
		if err == nil || !strings.HasPrefix(err.Error(), "kafka-brokers (DQ_KAFKA_BROKERS) ") || strings.Contains(err.Error(), "s3cr3t") ||
			!strings.Contains(err.Error(), "DQ_KAFKA_SASL_PASSWORD") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// The shared settings refuse credentials in the Redis, sentinel and etcd
// addresses (Validate).
func TestValidateRefusesCredentialsInAddrs(t *testing.T) {
	for env, v := range map[string]string{
		"DQ_REDIS_ADDRS":          "default:s3cr3t@10.0.0.1:6379",
		"DQ_REDIS_SENTINEL_ADDRS": "u:s3cr3t@10.0.0.1:26379",
		"DQ_ETCD_ENDPOINTS":       "http://root:s3cr3t@10.0.0.1:2379",
	} {
		var c Common
		var e Etcd
		b := NewBinder("test")
		c.BindCommon(b, ":1")
		e.BindEtcd(b, "")
		vars := map[string]string{env: v, "DQ_REDIS_SENTINEL_MASTER": "m"}
		if env != "DQ_REDIS_SENTINEL_ADDRS" {
			delete(vars, "DQ_REDIS_SENTINEL_MASTER")
		}
		if err := b.Parse(nil, func(k string) string { return vars[k] }, nil); err != nil {
			t.Fatal(err)
		}
		err := errors.Join(c.Validate(), e.ValidateEtcd())
		if err == nil || !strings.Contains(err.Error(), env) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s=%s: %v", env, v, err)
		}
	}
}
