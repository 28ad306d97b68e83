package work

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/task"
	"github.com/delayq/delayq/internal/testenv/worktest"
)

const testSecret = "sink-secret"

// sink is a webhook receiver that records every call and answers what its
// respond function says.
type sink struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   map[string][]call
	respond func(c call, w http.ResponseWriter, r *http.Request) // nil: 200
}

type call struct {
	id      string
	path    string // which worker called (each gets its own path)
	attempt int
	at      time.Time
	dueAt   time.Time
	sigOK   bool
}

func newSink(t *testing.T) *sink {
	s := &sink{calls: map[string][]call{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := make([]byte, 0, 64)
		buf := make([]byte, 4096)
		for {
			n, err := r.Body.Read(buf)
			body = append(body, buf[:n]...)
			if err != nil {
				break
			}
		}
		att, _ := strconv.Atoi(r.Header.Get("Dq-Attempt"))
		due, _ := strconv.ParseInt(r.Header.Get("Dq-Due-At"), 10, 64)
		c := call{id: r.Header.Get("Dq-Id"), path: r.URL.Path, attempt: att, at: time.Now(), dueAt: task.FromMillis(due),
			sigOK: r.Header.Get("Dq-Signature") == Signature([]byte(testSecret), r.Header.Get("Dq-Id"), att, body)}
		s.mu.Lock()
		s.calls[c.id] = append(s.calls[c.id], c)
		respond := s.respond
		s.mu.Unlock()
		if respond != nil {
			respond(c, w, r)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) setRespond(f func(c call, w http.ResponseWriter, r *http.Request)) {
	s.mu.Lock()
	s.respond = f
	s.mu.Unlock()
}

func (s *sink) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls[id])
}

func (s *sink) get(id string) []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls[id]...)
}

// check reports ids called a number of times other than want, ids whose
// signature did not verify, and per-path call counts.
func (s *sink) check(want map[string]int) (wrong []string, byPath map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byPath = map[string]int{}
	for id, cs := range s.calls {
		if n, ok := want[id]; !ok || n != len(cs) {
			wrong = append(wrong, fmt.Sprintf("%s×%d", id, len(cs)))
		}
		for _, c := range cs {
			byPath[c.path]++
			if !c.sigOK {
				wrong = append(wrong, id+" bad signature")
			}
		}
	}
	for id := range want {
		if _, ok := s.calls[id]; !ok && want[id] > 0 {
			wrong = append(wrong, id+" never called")
		}
	}
	sort.Strings(wrong)
	return wrong, byPath
}

func (s *sink) lag() (p50, p99, mx time.Duration, n int) {
	s.mu.Lock()
	var l []time.Duration
	for _, cs := range s.calls {
		for _, c := range cs {
			l = append(l, c.at.Sub(c.dueAt))
		}
	}
	s.mu.Unlock()
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[len(l)/2], l[min(len(l)*99/100, len(l)-1)], l[len(l)-1], len(l)
}

// env is one test's Redis, Kafka, store and firer (worktest.Env) and the
// work tests' helpers on it.
type env struct{ *worktest.Env }

const shards = 4

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{worktest.NewEnv(t, shards, task.DefaultTopic, "dq.dead")}
}

// vars is the environment of a work process of this env, posting to
// sinkURL.
func (e *env) vars(sinkURL string) map[string]string {
	return map[string]string{
		"DQ_NAMESPACE":             e.NS,
		"DQ_REDIS_ADDRS":           e.Redis.Addr,
		"DQ_SHARDS":                strconv.Itoa(shards),
		"DQ_HTTP_ADDR":             "127.0.0.1:0",
		"DQ_KAFKA_BROKERS":         e.Kafka.Brokers[0],
		"DQ_GROUP":                 e.Group,
		"DQ_WEBHOOK_URL":           sinkURL,
		"DQ_WEBHOOK_SECRET":        testSecret,
		"DQ_WORK_CONCURRENCY":      "8",
		"DQ_DEFAULT_TIMEOUT":       "5s",
		"DQ_BACKOFF_MIN":           "100ms",
		"DQ_BACKOFF_MAX":           "2s",
		"DQ_BACKOFF_JITTER":        "0.2", // delays of successive attempts do not overlap: 80-100ms, 160-200ms, ...
		"DQ_CLAIM_MARGIN":          "1s",
		"DQ_KAFKA_SESSION_TIMEOUT": "1s",
		"DQ_KAFKA_HEARTBEAT":       "100ms",
		"DQ_SHUTDOWN_TIMEOUT":      "5s",
		"DQ_LOG_LEVEL":             "warn",
		"DQ_LOG_FORMAT":            "text",
	}
}

func jsonTask(id, typ string) *task.Task {
	return &task.Task{ID: id, Type: typ, Payload: []byte(`{"id":"` + id + `"}`), PayloadJSON: true}
}
