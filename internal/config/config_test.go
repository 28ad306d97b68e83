package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestPrecedenceFlagThenEnvThenDefault(t *testing.T) {
	var c Common
	var timeout time.Duration
	b := NewBinder("test")
	c.BindCommon(b, ":1")
	b.Duration(&timeout, "timeout", "DQ_TIMEOUT", time.Second, "t")
	env := map[string]string{"DQ_NAMESPACE": "fromenv", "DQ_SHARDS": "8", "DQ_REDIS_ADDRS": "a:1, b:2", "DQ_TIMEOUT": "5s"}
	if err := b.Parse([]string{"-shards", "4"}, func(k string) string { return env[k] }, nil); err != nil {
		t.Fatal(err)
	}
	if c.Shards != 4 || c.Namespace != "fromenv" || timeout != 5*time.Second || c.HTTPAddr != ":1" {
		t.Fatalf("got %+v timeout %v", c, timeout)
	}
	if fmt.Sprint(c.RedisAddrs) != "[a:1 b:2]" {
		t.Fatalf("list %v", c.RedisAddrs)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	attrs := fmt.Sprint(b.LogAttrs())
	if !strings.Contains(attrs, "redis-addrs=a:1,b:2") {
		t.Fatalf("effective config does not show the list: %s", attrs)
	}
}

func TestBadValuesNameTheVariable(t *testing.T) {
	var c Common
	b := NewBinder("test")
	c.BindCommon(b, ":1")
	err := b.Parse(nil, func(k string) string {
		if k == "DQ_SHARDS" {
			return "many"
		}
		return ""
	}, nil)
	if err == nil || !strings.Contains(err.Error(), "DQ_SHARDS") {
		t.Fatalf("want an error naming DQ_SHARDS, got %v", err)
	}
	for _, mutate := range []func(*Common){
		func(c *Common) { c.Namespace = "a{b}" },
		func(c *Common) { c.Shards = 0 },
		func(c *Common) { c.RedisAddrs = nil },
		func(c *Common) { c.LogLevel = "loud" },
	} {
		var c Common
		b := NewBinder("test")
		c.BindCommon(b, ":1")
		_ = b.Parse(nil, func(string) string { return "" }, nil)
		mutate(&c)
		if c.Validate() == nil {
			t.Fatalf("invalid config accepted: %+v", c)
		}
	}
}

func TestSecretsRedacted(t *testing.T) {
	var c Common
	b := NewBinder("test")
	c.BindCommon(b, ":1")
	_ = b.Parse([]string{"-redis-password", "hunter2"}, func(string) string { return "" }, nil)
	if s := fmt.Sprint(b.LogAttrs()); strings.Contains(s, "hunter2") || !strings.Contains(s, "REDACTED") {
		t.Fatalf("secret not redacted: %s", s)
	}
}

// One address is a standalone client unless DQ_REDIS_CLUSTER says it is a
// cluster's endpoint; several addresses are a cluster either way.
func TestRedisClusterSetting(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		cluster bool
	}{
		{map[string]string{"DQ_REDIS_ADDRS": "a:1"}, false},
		{map[string]string{"DQ_REDIS_ADDRS": "a:1", "DQ_REDIS_CLUSTER": "true"}, true},
		{map[string]string{"DQ_REDIS_ADDRS": "a:1,b:2"}, true},
	} {
		var cfg Common
		b := NewBinder("test")
		cfg.BindCommon(b, ":1")
		if err := b.Parse(nil, func(k string) string { return c.env[k] }, nil); err != nil {
			t.Fatal(err)
		}
		rdb, err := cfg.RedisClient()
		if err != nil {
			t.Fatal(err)
		}
		_, isCluster := rdb.(*redis.ClusterClient)
		_ = rdb.Close()
		if isCluster != c.cluster {
			t.Errorf("%v: cluster client %v, want %v", c.env, isCluster, c.cluster)
		}
	}
}
