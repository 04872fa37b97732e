package epoch

// Home is the home region of range rng among regions (in preference order):
// the region Directory.Init pins it to when the cluster is created,
// regions[rng mod len(regions)]. Ranges that moved away (a failover, a
// graceful stop's hand-off) move back to their home once it is healthy again
// (ControllerConfig.FailbackAfter). Empty when regions is empty.
func Home(rng uint32, regions []string) string {
	if len(regions) == 0 {
		return ""
	}
	return regions[int(rng)%len(regions)]
}
