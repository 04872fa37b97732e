package pebblestore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadMinFree is returned by ParseMinFree.
var ErrBadMinFree = errors.New("pebblestore: bad free-space watermark")

// ParseMinFree parses a low-disk watermark: a share of the filesystem
// ("3%"), a size ("64MiB", "512KiB", "2GiB", "1048576"), or both separated
// by a comma ("3%,64MiB": the larger applies). "0" turns the check off.
func ParseMinFree(v string) (bytes uint64, fraction float64, err error) {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if pct, ok := strings.CutSuffix(part, "%"); ok {
			f, perr := strconv.ParseFloat(pct, 64)
			if perr != nil || f < 0 || f >= 100 {
				return 0, 0, fmt.Errorf("%w: %q (a percentage in [0, 100))", ErrBadMinFree, part)
			}
			fraction = max(fraction, f/100)
			continue
		}
		mult := uint64(1)
		for _, u := range []struct {
			suffix string
			mult   uint64
		}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
			if n, ok := strings.CutSuffix(part, u.suffix); ok {
				part, mult = n, u.mult
				break
			}
		}
		n, perr := strconv.ParseUint(part, 10, 64)
		if perr != nil || n > (1<<63)/mult {
			return 0, 0, fmt.Errorf("%w: %q (want e.g. 3%%, 64MiB or 3%%,64MiB)", ErrBadMinFree, v)
		}
		bytes = max(bytes, n*mult)
	}
	return bytes, fraction, nil
}
