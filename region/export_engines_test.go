package region

import "testing"

// EnginesForTest is a region's configuration on the real servers (a fresh
// keyspace, topic and Redis prefix, dropped when t ends), for the external
// tests; it skips t when a server is missing.
func EnginesForTest(t testing.TB, name string) Engines { return engineConfig(t, realEngines(t), name) }
