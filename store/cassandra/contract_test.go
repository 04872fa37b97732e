package cassandra_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/edge/edgetest"
	"github.com/likes-dev/likes/pipeline/pipelinetest"
	"github.com/likes-dev/likes/store/cassandra"
)

const t0 = int64(1_700_000_000_000)

func TestMain(m *testing.M) {
	code := m.Run()
	cassandra.CloseTestSession()
	os.Exit(code)
}

// open opens a store on a fresh keyspace.
func open(t *testing.T, partitions int, clk clock.Clock) *cassandra.Store {
	t.Helper()
	ks := cassandra.FreshKeyspace(t)
	return openOn(t, ks, partitions, clk)
}

func openOn(t *testing.T, ks string, partitions int, clk clock.Clock) *cassandra.Store {
	t.Helper()
	return openGroups(t, ks, partitions, 0, clk)
}

// openGroups opens a store with Options.SequenceGroups = groups (0: the
// default; -1: the per-partition layout of keyspaces created before schema 10).
func openGroups(t *testing.T, ks string, partitions, groups int, clk clock.Clock) *cassandra.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if groups < 0 {
		created := time.Now().UnixMilli()
		if clk != nil {
			created = clk.Now().UnixMilli()
		}
		cassandra.MakeLegacySequence(t, ks, "r1", partitions, created)
		groups = 0
	}
	s, err := cassandra.Open(ctx, cassandra.Options{
		Session: cassandra.SharedSession(t), Keyspace: ks, Region: "r1", Partitions: partitions, Clock: clk,
		OnError: func(err error) { t.Logf("background: %v", err) }, SequenceGroups: groups,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStoreContract(t *testing.T) {
	cassandra.SharedSession(t)
	edgetest.RunStore(t, func(t *testing.T) edge.Store {
		return open(t, 8, clock.NewFake(time.UnixMilli(t0)))
	})
}

func TestJobStoreContract(t *testing.T) {
	cassandra.SharedSession(t)
	edgetest.RunJobStore(t, func(t *testing.T) (edge.Store, edge.JobStore) {
		s := open(t, 4, nil)
		return s, s
	})
}

func TestPipelineContract(t *testing.T) {
	cassandra.SharedSession(t)
	for _, tc := range []struct {
		name   string
		parts  int
		fake   bool
		groups int // Options.SequenceGroups (-1: the per-partition layout)
	}{
		{"fake-clock-8", 8, true, 0},
		{"fake-clock-1", 1, true, 0},
		{"real-clock-3", 3, false, 0},
		{"fake-clock-8-three-groups", 8, true, 3},
		{"real-clock-3-per-partition-rows", 3, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pipelinetest.Run(t, func(t *testing.T) pipelinetest.Harness {
				var fake *clock.Fake
				var clk clock.Clock = clock.Real{}
				if tc.fake {
					fake = clock.NewFake(time.UnixMilli(t0))
					clk = fake
				}
				s := openGroups(t, cassandra.FreshKeyspace(t), tc.parts, tc.groups, clk)
				return pipelinetest.Harness{Store: s, Log: s, Cells: s, Counts: s, Region: s.Region(), Clock: fake}
			})
		})
	}
}
