package measure

import (
	"syscall"
	"time"
)

// shortSleep blocks the calling thread in nanosleep for d.
func shortSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
