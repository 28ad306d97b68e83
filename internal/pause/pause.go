package pause

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/internal/task"
)

// ErrInvalidType is wrapped by the error of every function given a task
// type that is not a valid one (bad input: an API maps it to 400).
var ErrInvalidType = errors.New("invalid task type")

// ValidateType checks the type of a pause being set: what
// ValidateStoredType checks, and a task.PathSegment (no URL carries "."
// or ".." as the {type} segment of /v1/types/{type}/pause). The error wraps ErrInvalidType.
func ValidateType(typ string) error {
	if err := ValidateStoredType(typ); err != nil {
		return err
	}
	if !task.PathSegment(typ) { // "/" is refused above
		return fmt.Errorf("%w %q: must not be %q: it cannot be a path segment of the API (/v1/types/{type})", ErrInvalidType, typ, typ)
	}
	return nil
}

// ValidateStoredType checks a task type that may be paused already (set
// before ValidateType refused "." and ".."): task.ValidateKeyType, the
// rule of a type that names an etcd key (no '/', which would break the key
// layout). It is the rule of a resume and of the stored keys, so such a
// pause keeps applying and can be lifted. The error wraps ErrInvalidType.
func ValidateStoredType(typ string) error {
	if err := task.ValidateKeyType(typ); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidType, err)
	}
	return nil
}

// Prefix is the etcd prefix of the pause state of namespace ns.
func Prefix(ns string) string { return "/" + ns + "/paused/" }

// Key is the etcd key that marks type typ of namespace ns paused.
func Key(ns, typ string) string { return Prefix(ns) + typ }

// value is the JSON value of a pause key.
type value struct {
	PausedAt time.Time `json:"paused_at"`
}

func checkNS(ns string) error {
	if ns == "" || strings.Contains(ns, "/") {
		return fmt.Errorf("namespace %q: must be non-empty without '/'", ns)
	}
	return nil
}

func check(ns, typ string, validate func(string) error) error {
	if err := checkNS(ns); err != nil {
		return err
	}
	return validate(typ)
}

// Pause marks typ paused in namespace ns. changed is false when it was
// paused already (its paused_at is kept).
func Pause(ctx context.Context, cli *clientv3.Client, ns, typ string) (changed bool, err error) {
	if err := check(ns, typ, ValidateType); err != nil {
		return false, err
	}
	b, err := json.Marshal(value{PausedAt: time.Now().UTC()})
	if err != nil {
		return false, fmt.Errorf("encode pause of %s: %w", typ, err)
	}
	key := Key(ns, typ)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("pause %s: %w", typ, err)
	}
	return resp.Succeeded, nil
}

// Resume marks typ running in namespace ns. changed is false when it was
// not paused. Its parked tasks are the caller's to unpark
// (redisstore.Unpark); the work processes' reconcilers do it too.
func Resume(ctx context.Context, cli *clientv3.Client, ns, typ string) (changed bool, err error) {
	if err := check(ns, typ, ValidateStoredType); err != nil {
		return false, err
	}
	resp, err := cli.Delete(ctx, Key(ns, typ))
	if err != nil {
		return false, fmt.Errorf("resume %s: %w", typ, err)
	}
	return resp.Deleted > 0, nil
}

// List reads the paused types of namespace ns and when each was paused (a
// linearizable read). A key whose value does not decode still means paused
// (with a zero time); a key that names no valid type is left out.
func List(ctx context.Context, cli *clientv3.Client, ns string) (map[string]time.Time, error) {
	if err := checkNS(ns); err != nil {
		return nil, err
	}
	m, _, err := list(ctx, cli, Prefix(ns))
	return m, err
}

func list(ctx context.Context, cli *clientv3.Client, prefix string) (map[string]time.Time, int64, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list paused types: %w", err)
	}
	m := make(map[string]time.Time, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if typ, at, ok := decode(prefix, kv.Key, kv.Value); ok {
			m[typ] = at
		}
	}
	return m, resp.Header.Revision, nil
}

// decode reads one pause key: the type it names (ok false when it names
// no valid type) and when it was paused (zero when the value does not
// decode: the key alone means paused).
func decode(prefix string, key, val []byte) (typ string, at time.Time, ok bool) {
	typ = strings.TrimPrefix(string(key), prefix)
	if ValidateStoredType(typ) != nil {
		return "", time.Time{}, false
	}
	var v value
	if json.Unmarshal(val, &v) == nil {
		at = v.PausedAt
	}
	return typ, at, true
}
