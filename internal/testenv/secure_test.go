package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	kgoscram "github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	kgosasl "github.com/twmb/franz-go/pkg/sasl"
	fplain "github.com/twmb/franz-go/pkg/sasl/plain"
	fscram "github.com/twmb/franz-go/pkg/sasl/scram"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// wantErrContaining fails unless err is non-nil and contains want.
func wantErrContaining(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: error %v, want one containing %q", what, err, want)
	}
}

func TestRedisTLSWithACLUsers(t *testing.T) {
	t.Parallel()
	pki := NewPKI(t)
	r := StartRedis(t, RedisOptions{AOF: true, TLS: pki, Users: []RedisUser{
		{Name: "dq", Password: "dq-secret", Rules: []string{"~dq:*", "&dq:*", "+@all"}},
		{Name: "reader", Password: "reader-secret", Rules: []string{"~*", "+get"}},
	}})
	ctx := t.Context()

	c := r.Client(t) // Users[0] over TLS
	if err := c.Set(ctx, "dq:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET as dq over TLS: %v", err)
	}
	if got, err := c.Get(ctx, "dq:k").Result(); err != nil || got != "v" {
		t.Fatalf("GET as dq: %q %v", got, err)
	}
	if who, err := c.Do(ctx, "acl", "whoami").Text(); err != nil || who != "dq" {
		t.Errorf("ACL WHOAMI = %q %v, want dq", who, err)
	}
	wantErrContaining(t, "SET outside ~dq:*", c.Set(ctx, "other", "v", 0).Err(), "NOPERM")
	reader := r.ClientAs(t, "reader", "reader-secret")
	if got, err := reader.Get(ctx, "dq:k").Result(); err != nil || got != "v" {
		t.Errorf("GET as reader: %q %v", got, err)
	}
	wantErrContaining(t, "SET as reader (+get only)", reader.Set(ctx, "dq:k", "w", 0).Err(), "NOPERM")

	wantErrContaining(t, "the default user without password", r.ClientAs(t, "", "").Ping(ctx).Err(), "NOAUTH")
	wantErrContaining(t, "the default user (off)", r.ClientAs(t, "default", "any").Ping(ctx).Err(), "WRONGPASS")
	wantErrContaining(t, "a wrong password", r.ClientAs(t, "dq", "wrong").Ping(ctx).Err(), "WRONGPASS")

	for name, o := range map[string]*redis.Options{
		"no client certificate": {TLSConfig: &tls.Config{RootCAs: pki.CA.Pool(), MinVersion: tls.VersionTLS12}},
		"plain TCP":             {},
	} {
		o.Addr, o.Username, o.Password, o.MaxRetries = r.Addr, "dq", "dq-secret", -1
		cl := redis.NewClient(o)
		if err := cl.Ping(ctx).Err(); err == nil {
			t.Errorf("%s: PING succeeded", name)
		}
		_ = cl.Close()
	}

	r.Stop(t)
	r.Restart(t) // the readiness PING logs in over TLS as testenv's admin
	if got, err := c.Get(ctx, "dq:k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after Stop+Restart: %q %v", got, err)
	}
	r.Kill(t)
	r.Restart(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Kill+Restart: %v", err)
	}
}

func TestRedisClusterTLSWithACLUsers(t *testing.T) {
	t.Parallel()
	pki := NewPKI(t)
	c := StartRedisCluster(t, RedisOptions{TLS: pki, Users: []RedisUser{
		{Name: "dq", Password: "dq-secret", Rules: []string{"~*", "&*", "+@all"}},
	}})
	cc := c.Client(t)
	ctx := t.Context()
	const n = 30
	for i := range n {
		if err := cc.Set(ctx, "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatalf("SET through the TLS cluster client: %v", err)
		}
	}
	for _, node := range c.Nodes {
		if got, err := node.Client(t).DBSize(ctx).Result(); err != nil || got == 0 {
			t.Errorf("master %s holds %d keys (%v), want some", node.Addr, got, err)
		}
	}
	nodeless := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRetries: -1,
		TLSConfig: pki.ClientTLS(t), Username: "dq", Password: "wrong"})
	defer nodeless.Close()
	wantErrContaining(t, "a wrong password", nodeless.Get(ctx, "k0").Err(), "WRONGPASS")

	// AddMaster and MigrateSlots work over TLS as testenv's admin too
	m := c.AddMaster(t)
	slot := c.SlotOf(t, "k0")
	if st, err := c.MigrateSlots(ctx, m, []int{slot}, MigrateOptions{}); err != nil || st.Slots != 1 || st.Keys != 1 {
		t.Fatalf("migrate slot %d over TLS: %+v %v", slot, st, err)
	}
	if v, err := cc.Get(ctx, "k0").Int(); err != nil || v != 0 {
		t.Fatalf("GET k0 after its slot moved: %d %v", v, err)
	}
}

func TestEtcdTLSWithAuth(t *testing.T) {
	t.Parallel()
	pki := NewPKI(t)
	e := StartEtcdWith(t, EtcdOptions{TLS: pki, RootPassword: "root-secret", Users: []EtcdUser{
		{Name: "alice", Password: "alice-secret", Prefixes: []string{"/a/"}},
		{Name: ClientCN, Prefixes: []string{"/cn/"}}, // no password: the certificate's CN logs in
	}})
	ctx := t.Context()

	alice := e.ClientAs(t, "alice", "alice-secret")
	if _, err := alice.Put(ctx, "/a/x", "1"); err != nil {
		t.Fatalf("put /a/x as alice: %v", err)
	}
	if resp, err := alice.Get(ctx, "/a/x"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
		t.Fatalf("get /a/x as alice: %v %v", resp, err)
	}
	for _, key := range []string{"/b/x", "/a"} {
		if _, err := alice.Put(ctx, key, "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("put %s as alice: %v, want %v", key, err, rpctypes.ErrPermissionDenied)
		}
	}
	if _, err := e.Client(t).Put(ctx, "/b/x", "1"); err != nil { // root
		t.Errorf("put /b/x as root: %v", err)
	}
	byCert := e.ClientAs(t, "", "")
	if _, err := byCert.Put(ctx, "/cn/x", "1"); err != nil {
		t.Errorf("put /cn/x as the certificate's CN %q: %v", ClientCN, err)
	}
	if _, err := byCert.Put(ctx, "/a/y", "1"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("put /a/y as %q: %v, want %v", ClientCN, err, rpctypes.ErrPermissionDenied)
	}

	failing := func(what string, tlsConf *tls.Config, user, password string) error {
		t.Helper()
		cl, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, TLS: tlsConf, Username: user, Password: password,
			DialTimeout: time.Second, Logger: zap.NewNop()})
		if err == nil {
			defer cl.Close()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err = cl.Get(cctx, "/a/x")
		}
		if err == nil {
			t.Errorf("%s: get /a/x succeeded", what)
		}
		return err
	}
	_ = failing("no client certificate", &tls.Config{RootCAs: pki.CA.Pool(), MinVersion: tls.VersionTLS12}, "alice", "alice-secret")
	if err := failing("a wrong password", pki.ClientTLS(t), "alice", "wrong"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
	}

	e.Stop(t)
	e.Restart(t)
	// simple auth tokens die with the server: the client logs in again
	var last error
	if !poll(startTimeout, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, last = alice.Get(cctx, "/a/x")
		return last == nil
	}) {
		t.Fatalf("get /a/x as alice after Restart: %v", last)
	}
}

func TestKafkaTLSWithSASL(t *testing.T) {
	t.Parallel()
	pki := NewPKI(t)
	type mech struct {
		name, user string
		franz      func(pass string) kgosasl.Mechanism
		kafkaGo    func(pass string) (sasl.Mechanism, error)
	}
	mechs := []mech{
		{"PLAIN", "p-user",
			func(p string) kgosasl.Mechanism { return fplain.Auth{User: "p-user", Pass: p}.AsMechanism() },
			func(p string) (sasl.Mechanism, error) { return plain.Mechanism{Username: "p-user", Password: p}, nil }},
		{"SCRAM-SHA-256", "s256-user",
			func(p string) kgosasl.Mechanism { return fscram.Auth{User: "s256-user", Pass: p}.AsSha256Mechanism() },
			func(p string) (sasl.Mechanism, error) { return kgoscram.Mechanism(kgoscram.SHA256, "s256-user", p) }},
		{"SCRAM-SHA-512", "s512-user",
			func(p string) kgosasl.Mechanism { return fscram.Auth{User: "s512-user", Pass: p}.AsSha512Mechanism() },
			func(p string) (sasl.Mechanism, error) { return kgoscram.Mechanism(kgoscram.SHA512, "s512-user", p) }},
	}
	var users []KafkaUser
	var topics []string
	for _, m := range mechs {
		users = append(users, KafkaUser{Mechanism: m.name, Name: m.user, Password: m.user + "-secret"})
		topics = append(topics, "secure-"+m.name)
	}
	k := StartKafkaWith(t, KafkaOptions{Partitions: 1, Topics: topics, TLS: pki, Users: users})
	k.CreateTopic(t, "secure-created", 1) // testenv's helper: TLS + the superuser

	for _, m := range mechs {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			topic := "secure-" + m.name
			pass := m.user + "-secret"

			user, err := kgo.NewClient(append(k.DialOpts(), kgo.SASL(m.franz(pass)),
				kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer user.Close()
			if err := user.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("franz")}).FirstErr(); err != nil {
				t.Fatalf("franz-go produce as %s: %v", m.user, err)
			}

			km, err := m.kafkaGo(pass)
			if err != nil {
				t.Fatal(err)
			}
			tr := &kafka.Transport{TLS: pki.ClientTLS(t), SASL: km}
			defer tr.CloseIdleConnections()
			w := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: topic, Transport: tr,
				RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond}
			if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("kafka-go")}); err != nil {
				t.Fatalf("kafka-go produce as %s: %v", m.user, err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			// the user consumes both records, and so does testenv's own
			// client (the superuser)
			sup := k.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			for who, cl := range map[string]*kgo.Client{m.user: user, KafkaSuperuser: sup} {
				got := map[string]bool{}
				for len(got) < 2 && ctx.Err() == nil {
					cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
				}
				if !got["franz"] || !got["kafka-go"] {
					t.Fatalf("consumed as %s: %v, want franz and kafka-go", who, got)
				}
			}

			wrong, err := kgo.NewClient(append(k.DialOpts(), kgo.SASL(m.franz("wrong")))...)
			if err != nil {
				t.Fatal(err)
			}
			defer wrong.Close()
			pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
			defer pcancel()
			// kfake closes the connection on a failed SASL exchange (the
			// clients see EOF) where Kafka answers SASL_AUTHENTICATION_FAILED
			if err := wrong.Ping(pctx); err == nil {
				t.Errorf("franz-go with a wrong password: Ping succeeded")
			}
			kwrong, err := m.kafkaGo("wrong")
			if err != nil {
				t.Fatal(err)
			}
			trw := &kafka.Transport{TLS: pki.ClientTLS(t), SASL: kwrong}
			defer trw.CloseIdleConnections()
			ww := &kafka.Writer{Addr: kafka.TCP(k.Brokers...), Topic: topic, Transport: trw, MaxAttempts: 1}
			if err := ww.WriteMessages(ctx, kafka.Message{Value: []byte("x")}); err == nil {
				t.Errorf("kafka-go with a wrong password: write succeeded")
			}
			_ = ww.Close()
		})
	}
}

func TestKafkaACLs(t *testing.T) {
	t.Parallel()
	k := StartKafkaWith(t, KafkaOptions{
		Partitions: 1,
		Topics:     []string{"acl-ok", "acl-denied"},
		Users:      []KafkaUser{{Mechanism: "SCRAM-SHA-256", Name: "writer", Password: "writer-secret"}},
		ACLs: []kfake.ACL{{Principal: "User:writer", Resource: kmsg.ACLResourceTypeTopic, Name: "acl-ok",
			Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite, Allow: true}},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append(k.DialOpts(), kgo.DisableIdempotentWrite(), kgo.RecordRetries(1),
		kgo.SASL(fscram.Auth{User: "writer", Pass: "writer-secret"}.AsSha256Mechanism()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "acl-ok", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce to acl-ok (allowed): %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "acl-denied", Value: []byte("v")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce to acl-denied: %v, want %v", err, kerr.TopicAuthorizationFailed)
	}
	// the superuser bypasses ACLs: testenv's helpers keep working
	if err := k.Client(t).ProduceSync(ctx, &kgo.Record{Topic: "acl-denied", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce to acl-denied as the superuser: %v", err)
	}
}
