package tmpfs

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes on a new temporary directory and
// returns the directory; it is unmounted when the test ends. Without the
// privilege to mount it skips the test, naming why (a failure when
// DQ_REQUIRE_TMPFS is set).
func Mount(tb testing.TB, size int64) string {
	tb.Helper()
	dir := tb.TempDir()
	err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+strconv.FormatInt(size, 10)+",mode=0700")
	if err != nil {
		unavailable(tb, fmt.Errorf("mount a %d-byte tmpfs on %s (needs CAP_SYS_ADMIN; uid %d): %w", size, dir, os.Getuid(), err))
		return ""
	}
	// (registered after TempDir's cleanup, so it runs before it)
	tb.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				tb.Errorf("tmpfs: unmount %s: %v", dir, err)
			}
		}
	})
	return dir
}
