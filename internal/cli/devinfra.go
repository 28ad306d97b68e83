//go:build !dqslim

package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/delayq/delayq/internal/config"
)

func runDevEtcd(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("dev etcd", env)
	var o EtcdOptions
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:2379", "client address host:port (0.0.0.0:2379 in a container)")
	fs.StringVar(&o.Advertise, "advertise", "", "client URL to announce (default: http://LISTEN, an unspecified host replaced by this machine's address)")
	fs.StringVar(&o.PeerListen, "peer-listen", "127.0.0.1:2380", "raft peer address (loopback is enough for one member)")
	fs.StringVar(&o.DataDir, "data-dir", "dq-etcd", "data directory (a volume in a container)")
	fs.StringVar(&o.Name, "name", "dq", "member name")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	o.Log = env.Stderr
	srv, err := StartEtcd(ctx, o)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(env.Stderr, "etcd ready: listening on %s, advertising %s, data in %s\n",
		srv.Config().ListenClientUrls[0].Host, srv.Config().AdvertiseClientUrls[0].String(), o.DataDir)
	select {
	case <-ctx.Done():
		fmt.Fprintln(env.Stderr, "etcd: shutting down")
		return nil
	case err := <-srv.Err():
		return fmt.Errorf("etcd: %w", err)
	}
}

func runDevKafka(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet("dev kafka", env)
	var o KafkaOptions
	var topics string
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:9092", "address host:port (0.0.0.0:9092 in a container)")
	fs.StringVar(&o.Advertise, "advertise", "", "host[:port] clients are told to connect to (default: the listen host, an unspecified one replaced by this machine's address)")
	fs.IntVar(&o.Partitions, "partitions", 4, "partitions of created topics")
	fs.StringVar(&topics, "topics", "dq.tasks,dq.dead", "topics to create at start (comma-separated); others are created on first use")
	fs.StringVar(&o.DataDir, "data-dir", "", "persist the broker's data here (default: in memory only)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	o.Topics = config.Split(topics)
	o.Log = env.Stderr
	if o.DataDir != "" {
		if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
			return fmt.Errorf("kafka data dir: %w", err)
		}
	}
	k, err := StartKafka(o)
	if err != nil {
		return err
	}
	defer k.Close()
	fmt.Fprintf(env.Stderr, "kafka ready: listening on %s, advertising %s, topics %s (%d partitions)\n",
		k.Listen, k.Advertised, strings.Join(o.Topics, ","), o.Partitions)
	<-ctx.Done()
	fmt.Fprintln(env.Stderr, "kafka: shutting down")
	return nil
}
