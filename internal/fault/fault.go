// Package fault holds delayq's fault-injection points, so that the chaos
// suite (integration/chaos) can aim faults at real binaries. They exist
// only in binaries built with the tag dqfault (or dqplant): a normal build
// compiles Point to an empty function and Now to time.Now, reads no
// environment and has no init (fault_off.go), like etcd's failpoints, which
// are comments until a failpoint build turns them into code.
//
// In a dqfault build the environment drives them (fault_on.go):
//
//   - DQ_FAULT_CRASH="after-take=0.01,before-ack=0.02": at each named
//     point, with that probability, the process kills itself with SIGKILL
//     (a crash at exactly that step of the fire or work path).
//   - DQ_FAULT_SEED: seeds those draws (default: from the pid and time).
//   - DQ_FAULT_CLOCK_SKEW="-3s": Now() runs that far off the real clock.
//     delayq decides due times by Redis' clock, so a skewed process clock
//     must not change when anything fires; the chaos suite checks that.
//
// Points in use: after-take, after-produce, before-ack (cmd/event);
// after-claim, after-handle, before-finish (cmd/work); after-replay
// (cmd/daemon: a journal page written to Redis, not yet committed).
//
// Plant(name) reports a planted bug, compiled in only with the build tag
// dqplant and chosen by DQ_PLANT; the chaos suite builds such binaries to
// show that its checkers catch each bug (see plant_on.go).
package fault
