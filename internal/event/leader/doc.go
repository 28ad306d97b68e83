// Package leader decides which event process leads which shard: one etcd
// session per process, one concurrency.Election per shard, a fencing token
// (the election revision) per leadership, and a balancing rule (Decide)
// that keeps the number of shards led by live processes within one of each
// other with little churn.
//
// The etcd key layout (members, election candidates per shard) is package
// election's, which the daemon reads too. ResumeElection is never used.
//
// The shard count only grows: Config.Shards is the initial count and
// Manager.SetShards raises it while the manager runs. The session loop is
// woken at once and balances over the new count (Decide over a longer
// view); shards it leads are kept. The view holds the candidates of every
// shard in the watch, also those at or above this process' count (another
// process may learn of a growth first and lead new shards already), so
// that after a growth it knows who leads them without a new read. Processes
// that know different counts never lead a shard twice (each shard is its
// own election); the split is even once all of them know the same count.
//
// Guards against the known sharp edges of concurrency.Election (see
// RELIABILITY.md):
//   - Campaign runs under a context derived from the session, so the
//     session's death cancels it (it does not watch its own session).
//   - After Campaign returns, the key is read back: it must exist with our
//     lease and Election.Rev() as create revision, else the session is
//     closed (phantom leadership, etcd#19597).
//   - A campaign that ends without leading deletes its candidate key
//     (etcd#21128); keys of ours that no campaign owns are deleted by the
//     reconcile loop, tied to their create revision.
//   - Resign is a compare-and-delete on the key's create revision, retried
//     and bounded (Election.Resign forgets its state after one failed
//     request, etcd#22123); if it cannot be done the session is closed.
//   - The work of a shard (the LeadFunc) has returned before the shard is
//     resigned; when the session dies, every LeadFunc's context is cancelled
//     and the next session starts only after all of them returned.
//   - Lead.ValidUntil tells the work when the lease may have expired on the
//     server (last keep-alive answer + TTL - margin) so that it starts no
//     new batch past it; when the watch shows our leader key gone, the work
//     is cancelled at once.
//   - The previous session's lease is revoked as soon as a new session
//     exists, so keys it still holds (e.g. restored by an etcd restart) do
//     not block the shards for another TTL.
//
// One session per process (not one per leadership attempt, as RELIABILITY
// rule 2 suggests) keeps the keep-alive traffic at one stream per process;
// failures that concern a single shard are handled per shard (resign,
// delete the candidate key) and only failures that make the session
// untrustworthy close it, which restarts every shard of the process.
package leader
