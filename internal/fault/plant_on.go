//go:build dqplant

package fault

import "os"

// Plant reports whether DQ_PLANT names the planted bug name. Only test
// builds made with -tags dqplant have planted bugs; the chaos suite uses
// them to show that each of its checkers fails on the bug it looks for:
//
//   - nofence: the Lua fence check never refuses a token (a deposed leader
//     keeps taking and acking);
//   - earlyack: the poller acks a batch before Kafka confirmed it (a crash
//     between the two loses the batch);
//   - localclock: the take uses the process' own clock (fault.Now) instead
//     of Redis TIME (a skewed event process fires early).
func Plant(name string) bool { return os.Getenv("DQ_PLANT") == name }
