// Package cli implements dq, delayq's command-line tool: the daemon API
// from a terminal (schedule, get, reschedule, cancel, stats, dead, limits, shards,
// import), a health probe for container healthchecks (dq health), the
// infrastructure a container deployment without registry images needs
// (dq dev etcd, dq dev kafka), and the whole system in one process for
// trying it out (dq dev).
//
// dq is also a multi-call binary: started under the name daemon, event or
// work (a symlink, as in the container image) it runs that application,
// exactly as cmd/daemon, cmd/event and cmd/work do. One binary instead of
// four keeps the image small, since all of them share most of their code.
package cli
