package worked

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/etcdwatch"
	"github.com/delayq/delayq/internal/task"
)

// ErrInvalidTopic is wrapped by the error of every function given a topic
// name that is not a valid one (bad input: an API maps it to 422).
var ErrInvalidTopic = errors.New("invalid topic")

// ValidateTopic checks a worked topic's name: not empty, and a task's
// topic rule (task.ValidateTopic). The error wraps ErrInvalidTopic and its
// message starts with "topic:".
func ValidateTopic(topic string) error {
	if topic == "" {
		return fmt.Errorf("%w: %w", ErrInvalidTopic, &task.FieldError{Field: "topic", Reason: "must not be empty"})
	}
	if err := task.ValidateTopic(topic); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidTopic, err)
	}
	return nil
}

// Prefix is the etcd prefix of the worked topics of namespace ns.
func Prefix(ns string) string { return "/" + ns + "/worked/" }

// Key is the etcd key that declares topic worked in namespace ns.
func Key(ns, topic string) string { return Prefix(ns) + topic }

// Topic is one worked topic: which consumer group declared it first,
// when, and which process did.
type Topic struct {
	Topic string    `json:"topic"`
	Group string    `json:"group"`
	By    string    `json:"by"`
	Since time.Time `json:"since"` // RFC 3339 with milliseconds, UTC; zero when the stored value did not say
}

// topicJSON is Topic's JSON form.
type topicJSON struct {
	Topic string `json:"topic"`
	Group string `json:"group"`
	Since string `json:"since"`
	By    string `json:"by"`
}

// MarshalJSON writes since in RFC 3339 with milliseconds, UTC (empty when
// zero).
func (t Topic) MarshalJSON() ([]byte, error) {
	v := topicJSON{Topic: t.Topic, Group: t.Group, By: t.By}
	if !t.Since.IsZero() {
		v.Since = t.Since.UTC().Format(task.TimeLayout)
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON writes; an empty since is the zero
// time.
func (t *Topic) UnmarshalJSON(b []byte) error {
	var v topicJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out := Topic{Topic: v.Topic, Group: v.Group, By: v.By}
	if v.Since != "" {
		s, err := time.Parse(time.RFC3339Nano, v.Since)
		if err != nil {
			return fmt.Errorf("since: %w", err)
		}
		out.Since = s.UTC()
	}
	*t = out
	return nil
}

func checkNS(ns string) error {
	if ns == "" || strings.Contains(ns, "/") {
		return fmt.Errorf("namespace %q: must be non-empty without '/'", ns)
	}
	return nil
}

func check(ns, topic string) error {
	if err := checkNS(ns); err != nil {
		return err
	}
	return ValidateTopic(topic)
}

// Declare marks topic worked in namespace ns, by consumer group group and
// process by, unless it is already: created is false then, and the stored
// declaration (its group, since and by) is kept. The key has no lease.
func Declare(ctx context.Context, cli *clientv3.Client, ns, topic, group, by string) (created bool, err error) {
	if err := check(ns, topic); err != nil {
		return false, err
	}
	b, err := json.Marshal(Topic{Topic: topic, Group: group, By: by, Since: time.Now().UTC().Truncate(time.Millisecond)})
	if err != nil {
		return false, fmt.Errorf("encode worked topic %s: %w", topic, err)
	}
	key := Key(ns, topic)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("declare worked topic %s: %w", topic, err)
	}
	return resp.Succeeded, nil
}

// Forget removes topic from the worked topics of namespace ns: its tasks
// fired from then on end "delivered" once Kafka acknowledges them.
// existed is false when it was not worked.
func Forget(ctx context.Context, cli *clientv3.Client, ns, topic string) (existed bool, err error) {
	if err := check(ns, topic); err != nil {
		return false, err
	}
	resp, err := cli.Delete(ctx, Key(ns, topic))
	if err != nil {
		return false, fmt.Errorf("forget worked topic %s: %w", topic, err)
	}
	return resp.Deleted > 0, nil
}

// List reads the worked topics of namespace ns (a linearizable read),
// sorted by topic. A key whose value does not decode still declares its
// topic (with the other fields empty); a key that names no valid topic is
// left out.
func List(ctx context.Context, cli *clientv3.Client, ns string) ([]Topic, error) {
	if err := checkNS(ns); err != nil {
		return nil, err
	}
	m, _, err := etcdwatch.List(ctx, cli, Prefix(ns), decode)
	if err != nil {
		return nil, fmt.Errorf("list worked topics: %w", err)
	}
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(x, y Topic) int { return strings.Compare(x.Topic, y.Topic) })
	return out, nil
}

// decode reads the value of the key of topic name (ok false when name is
// no valid topic). The name is the topic, whatever the value says.
func decode(name string, val []byte) (Topic, bool) {
	if ValidateTopic(name) != nil {
		return Topic{}, false
	}
	var t Topic
	if json.Unmarshal(val, &t) != nil {
		t = Topic{}
	}
	t.Topic = name
	return t, true
}

// View keeps the worked topics of a namespace in memory, current through
// an etcd watch (package etcdwatch). Worked, Topics, Ready and Synced read
// it without a lock or blocking and are safe for concurrent use. Until Run
// listed the registry once, no topic is worked: a caller that must not
// take a worked topic for an unworked one waits for Ready first.
type View struct {
	ns  string
	cli *clientv3.Client
	m   *etcdwatch.Map[Topic]
}

// NewView returns the view of namespace ns's worked topics. Call Run (it
// returns the error of a bad namespace or a nil client).
func NewView(cli *clientv3.Client, ns string, log *slog.Logger) *View {
	m := etcdwatch.New(cli, Prefix(ns), decode, log, "worked topics", etcdwatch.ChangeLog(slog.LevelInfo, "worked_topics"))
	return &View{ns: ns, cli: cli, m: m}
}

// Run keeps the view current until ctx ends: it lists the registry, then
// watches it from the next revision; when the watch fails (etcd
// unreachable, a compacted revision, no leader) it lists again after a
// backoff, readers keeping the last view meanwhile. It returns nil when
// ctx ends.
func (v *View) Run(ctx context.Context) error {
	if err := checkNS(v.ns); err != nil {
		return fmt.Errorf("worked topics view: %w", err)
	}
	if v.cli == nil {
		return errors.New("worked topics view: no etcd client")
	}
	return v.m.Run(ctx)
}

// Ready is closed once Run listed the registry the first time.
func (v *View) Ready() <-chan struct{} { return v.m.Ready() }

// Synced reports whether the view is known to be current (listed, and its
// watch established); false before the first list and from a watch
// failure until the next list, while the last view stays in force.
func (v *View) Synced() bool { return v.m.Synced() }

// Worked reports whether topic is worked in the current view (false until
// Ready is closed).
func (v *View) Worked(topic string) bool {
	_, ok := v.m.Snapshot()[topic]
	return ok
}

// Topics lists the worked topics of the current view, sorted (empty until
// Ready is closed).
func (v *View) Topics() []string {
	m := v.m.Snapshot()
	if m == nil {
		return []string{}
	}
	return slices.Sorted(maps.Keys(m))
}
