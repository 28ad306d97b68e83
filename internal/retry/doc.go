// Package retry provides the two pieces every retry loop of delayq shares:
// Backoff, a capped exponential delay with jitter, and Sleep, a wait that
// ends early when its context ends.
package retry
