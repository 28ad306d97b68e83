package daemon

import (
	"context"
	"net/http"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/delayq/delayq/api"
	"github.com/delayq/delayq/internal/daemon/wire"
	"github.com/delayq/delayq/internal/election"
	"github.com/delayq/delayq/internal/redisstore"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/internal/worked"
)

// GET /v1/cluster: every shard with its leader (from the shard's etcd
// election), its fencing token and backlog (from Redis); every registered
// process (package registry); the worked topics (package worked); the
// journal. It always answers 200: a part
// it cannot read is named in redis_error or etcd_error, and the rest is
// still shown (an operator looks here most when something is down).

// The answer is api.Cluster, the wire type the Go client reads.

func (a *App) handleCluster(c *call) (int, any, *wire.Error) {
	n := a.core.shardCount()
	resp := api.Cluster{Namespace: a.cfg.Namespace, ShardCount: n, Processes: []api.Process{}, WorkedTopics: []api.WorkedTopic{}}
	resp.Shards = make([]api.ClusterShard, n)
	for i := range resp.Shards {
		resp.Shards[i].Shard = i
	}
	if st, e := a.core.storeFor(); e != nil {
		resp.RedisError = e.Message
	} else {
		var stats []redisstore.ShardStats
		err := a.core.inStore(c.Context(), func(ctx context.Context) (err error) {
			stats, err = st.Stats(ctx)
			return err
		})
		if err != nil {
			resp.RedisError = "redis " + redisCondition(err)
		} else {
			resp.RedisUp = true
			for _, s := range stats {
				if s.Shard < 0 || s.Shard >= len(resp.Shards) {
					continue // the map grew between shardCount and Stats: shown next time
				}
				sh := &resp.Shards[s.Shard]
				sh.LeaderToken, sh.Pending, sh.Overdue, sh.OldestOverdueSeconds = s.Token, s.Scheduled, s.Overdue, s.OldestOverdueSeconds
				sh.Paused, sh.Firing, sh.Dead = s.Paused, s.Firing, s.Dead
			}
		}
	}
	if cli, e := a.etcdFor("shard leaders, processes and worked topics"); e != nil {
		resp.EtcdError = e.Message
	} else if msg := a.clusterEtcd(c.Context(), cli, &resp); msg != "" {
		resp.EtcdError = msg
	}
	resp.JournalDepth = a.core.journalDepth()
	return http.StatusOK, resp, nil
}

// clusterEtcd fills in the shard leaders, the processes and the worked
// topics from etcd; it returns what it could not read ("" when all went
// well).
func (a *App) clusterEtcd(ctx context.Context, cli *clientv3.Client, resp *api.Cluster) string {
	ctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	procs, err := registry.List(ctx, cli, a.cfg.Namespace)
	if err != nil {
		return etcdError(err).Message
	}
	addrs := make(map[string]string, len(procs))
	for _, p := range procs {
		addrs[p.ID] = p.Addr
		cp := api.Process{ID: p.ID, Kind: p.Kind, Version: p.Version, Addr: p.Addr, Ready: p.Ready, Reason: p.Reason,
			StartedAt: p.StartedAt}
		if !p.AsOf.IsZero() {
			cp.Counters, cp.AsOf = p.Counters, p.AsOf
		}
		resp.Processes = append(resp.Processes, cp)
	}
	slices.SortFunc(resp.Processes, func(x, y api.Process) int {
		if c := strings.Compare(x.Kind, y.Kind); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	wts, err := worked.List(ctx, cli, a.cfg.Namespace)
	if err != nil {
		return etcdError(err).Message
	}
	for _, w := range wts {
		resp.WorkedTopics = append(resp.WorkedTopics, api.WorkedTopic{Topic: w.Topic, Group: w.Group, Since: w.Since, By: w.By})
	}
	// Every shard's candidates in one read. In an election the candidate
	// with the lowest create revision leads (concurrency.Election); its
	// value is what Campaign was given: the process id.
	ns := a.cfg.Namespace
	er, err := cli.Get(ctx, election.ShardsPrefix(ns), clientv3.WithPrefix())
	if err != nil {
		return etcdError(err).Message
	}
	lowest := make([]int64, len(resp.Shards))
	for _, kv := range er.Kvs {
		i, ok := election.ParseElectionKey(ns, string(kv.Key))
		if !ok || i >= len(resp.Shards) || !strings.HasPrefix(string(kv.Key), election.ElectionPrefix(ns, i)) {
			continue
		}
		if lowest[i] != 0 && kv.CreateRevision >= lowest[i] {
			continue
		}
		lowest[i] = kv.CreateRevision
		id := string(kv.Value)
		resp.Shards[i].Leader = &api.Leader{ID: id, Addr: addrs[id]}
	}
	return ""
}

// DELETE /v1/cluster/worked/{topic}: an operator forgets a worked topic
// (package worked) no work process handles any more: tasks fired to it
// from then on end "delivered" once Kafka has them. A work process that
// consumes it declares it again when it starts. 200 {"topic",
// "forgotten"} (false: it was not worked); 422 naming topic for a bad
// name; 503 when etcd is not configured or does not answer.

func (a *App) handleForgetWorkedTopic(c *call) (int, any, *wire.Error) {
	topic := c.PathValue("topic")
	if err := worked.ValidateTopic(topic); err != nil {
		return 0, nil, wire.InvalidTask(strings.TrimPrefix(err.Error(), worked.ErrInvalidTopic.Error()+": "))
	}
	cli, e := a.etcdFor("worked topics")
	if e != nil {
		return 0, nil, e
	}
	ctx, cancel := context.WithTimeout(c.Context(), etcdTimeout)
	defer cancel()
	existed, err := worked.Forget(ctx, cli, a.cfg.Namespace, topic)
	if err != nil {
		return 0, nil, etcdError(err)
	}
	if existed {
		a.log.Info("worked topic forgotten", "topic", topic)
	}
	return http.StatusOK, api.ForgottenTopic{Topic: topic, Forgotten: existed}, nil
}
