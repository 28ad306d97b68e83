package shardmap

import "time"

// timeAfter paces Watch's reloads after an etcd error.
func timeAfter() <-chan time.Time { return time.After(500 * time.Millisecond) }
