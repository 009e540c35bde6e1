package redislimit

import (
	"fmt"
	"slices"
	"time"
)

// CheckWindows verifies admissions against a limit: in no window of the given length did more than
// limit of them happen. Times are the server's, so that every controller's admissions compare.
func CheckWindows(admitted []time.Time, limit int, window time.Duration) error {
	ts := slices.Clone(admitted)
	slices.SortFunc(ts, time.Time.Compare)
	for i := limit; i < len(ts); i++ {
		if ts[i].Sub(ts[i-limit]) < window {
			return fmt.Errorf("%d admissions within %v, from %v to %v (limit %d)", limit+1, window, ts[i-limit], ts[i], limit)
		}
	}
	return nil
}
