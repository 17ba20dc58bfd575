//go:build !linux

package measure

import "time"

// shortSleep sleeps for d (a runtime timer where nanosleep is not wrapped).
func shortSleep(d time.Duration) { time.Sleep(d) }
