// Package tmpfs gives a test a small file system of its own that it can
// fill: a tmpfs of a given size, mounted on a temporary directory and
// unmounted at cleanup. It is how the journal's full-disk tests run on a
// real file system that refuses writes with ENOSPC.
//
// Mounting needs CAP_SYS_ADMIN (root, or a privileged container). Without
// it the test is a loud, named skip, or a failure when DQ_REQUIRE_TMPFS is
// set (where the full-disk tests must run).
package tmpfs
