//go:build !unix

package loadgen

import "time"

func selfCPU() (time.Duration, bool) { return 0, false }
