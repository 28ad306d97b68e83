package systems

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/bench/internal/tbenv"
	"github.com/delayq/delayq/internal/testenv"
)

// DeadTopic is delayq's dead-letter topic on the shared broker.
const DeadTopic = "dq.dead"

// Infra is the infrastructure both systems share.
type Infra struct {
	TB    *tbenv.TB
	Redis *testenv.Redis
	RDB   *redis.Client
	Etcd  *testenv.Etcd
	Kafka *testenv.Kafka
}

// StartInfra starts redis-server (testenv's settings: no persistence,
// noeviction, listpack hashes up to 512-byte values), a single-member etcd
// and a kfake broker, all bound to tb.
func StartInfra(tb *tbenv.TB) *Infra {
	r := testenv.StartRedis(tb)
	return &Infra{
		TB:    tb,
		Redis: r,
		RDB:   r.Client(tb),
		Etcd:  testenv.StartEtcd(tb),
		Kafka: testenv.StartKafka(tb, DeadTopic),
	}
}

// FlushAll empties Redis between workloads.
func (in *Infra) FlushAll(ctx context.Context) error {
	return in.RDB.FlushAll(ctx).Err()
}

// UsedMemory is INFO memory used_memory in bytes.
func (in *Infra) UsedMemory(ctx context.Context) (int64, error) {
	v, err := in.info(ctx, "memory", "used_memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// RedisVersion is INFO server redis_version.
func (in *Infra) RedisVersion(ctx context.Context) (string, error) {
	return in.info(ctx, "server", "redis_version")
}

func (in *Infra) info(ctx context.Context, section, field string) (string, error) {
	s, err := in.RDB.Info(ctx, section).Result()
	if err != nil {
		return "", fmt.Errorf("INFO %s: %w", section, err)
	}
	for _, l := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s: no %s", section, field)
}

// RedisCPU is the CPU time redis-server used so far (INFO cpu
// used_cpu_user + used_cpu_sys).
func (in *Infra) RedisCPU(ctx context.Context) (time.Duration, error) {
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := in.info(ctx, "cpu", f)
		if err != nil {
			return 0, err
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", f, err)
		}
		total += x
	}
	return time.Duration(total * float64(time.Second)), nil
}
