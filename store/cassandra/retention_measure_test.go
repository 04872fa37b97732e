package cassandra_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// TestMeasureRetentionCassandra (LIKES_MEASURE=1; the servers of
// scripts/servers.sh env) is sim's TestMeasureSteadyDisk on one Cassandra
// store: a constant load of 50 like/unlike requests per simulated hour on 50
// items × 200 users, each with a fresh idempotency key, folded every hour,
// for 30 simulated days; once with 7-day retention rounds every simulated
// day, once without (the reference, same run, same seed). After days 1, 7
// and 30 it counts the rows of the tables retention bounds and, through
// `scripts/servers.sh nodetool` (flush, then a major compaction, so shadowed
// data is gone), the live bytes of the keyspace. Idempotency records expire
// by a TTL on the server's clock, which the simulated days do not move: they
// are counted, not expected to level off here.
func TestMeasureRetentionCassandra(t *testing.T) {
	if os.Getenv("LIKES_MEASURE") == "" {
		t.Skip("set LIKES_MEASURE=1 (and the servers of scripts/servers.sh env) to measure")
	}
	ctx := context.Background()
	ret, ref := newRetFixture(t, "r1", 4), newRetFixture(t, "r1", 4)
	ret.scan = 4096
	type row struct {
		day                                   int
		bytes, logBytes, cellBytes, idemBytes [2]int
		outbox, dedupe, idem, edges           [2]int
	}
	var rows []row
	rng := rand.New(rand.NewPCG(14, 30))
	n := 0
	const perHour, workers = 50, 10
	start := time.Now()
	for d := 1; d <= 30; d++ {
		for h := 0; h < 24; h++ {
			reqs := make([]edge.Request, perHour)
			for i := range reqs {
				n++
				target := crdt.Liked
				if rng.IntN(2) == 0 {
					target = crdt.Unliked
				}
				reqs[i] = edge.Request{Item: fmt.Sprintf("i%02d", rng.IntN(50)), User: fmt.Sprintf("u%03d", rng.IntN(200)),
					Target: target, Kind: edge.KindFlip, Epoch: 1, IdemKey: fmt.Sprintf("k%d", n), Fingerprint: fmt.Sprintf("f%d", n),
					Now: ret.clk.Now().UnixMilli(), IdemTTLms: day.Milliseconds()}
			}
			for _, f := range []*retFixture{ret, ref} {
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						for i := w; i < len(reqs); i += workers {
							r := reqs[i]
							r.Now = f.clk.Now().UnixMilli()
							if _, err := f.st.Apply(ctx, r); err != nil {
								t.Error(err)
							}
						}
					})
				}
				wg.Wait()
				f.aggregate()
				f.clk.Advance(time.Hour)
			}
			if t.Failed() {
				t.FailNow()
			}
		}
		ret.retain()
		if d == 1 || d == 7 || d == 30 {
			r := row{day: d}
			for i, f := range []*retFixture{ret, ref} {
				sizes := liveBytes(t, f.st.Keyspace())
				for _, n := range sizes {
					r.bytes[i] += n
				}
				r.logBytes[i], r.cellBytes[i], r.idemBytes[i] = sizes["outbox"], sizes["cells"], sizes["idem"]
				r.outbox[i] = tableRows(t, f, "outbox")
				r.dedupe[i] = tableRows(t, f, "")
				r.idem[i] = tableRows(t, f, "idem")
				r.edges[i] = tableRows(t, f, "edges")
			}
			rows = append(rows, r)
			t.Logf("day %d after %v: %+v", d, time.Since(start).Round(time.Second), r)
		}
	}
	ratio := func(a [2]int) string { return fmt.Sprintf("%d / %d", a[0], a[1]) }
	t.Log("| day | live bytes, 7 d retention / none | ratio | outbox bytes (log + feed) | cells bytes (cells + dedupe) | idempotency bytes | outbox rows | dedupe rows | idempotency rows | edges |")
	t.Log("|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		t.Logf("| %d | %s | %.2f | %s | %s | %s | %s | %s | %s | %s |", r.day, ratio(r.bytes), float64(r.bytes[0])/float64(max(1, r.bytes[1])),
			ratio(r.logBytes), ratio(r.cellBytes), ratio(r.idemBytes), ratio(r.outbox), ratio(r.dedupe), ratio(r.idem), ratio(r.edges))
	}
	for it := 0; it < 50; it++ {
		item := fmt.Sprintf("i%02d", it)
		if a, b := ret.count(item), ref.count(item); a != b {
			t.Fatalf("count of %s: %d with retention, %d without", item, a, b)
		}
	}
	t.Logf("CPU: %d cores; %d requests per store", runtime.NumCPU(), n)
}

// tableRows counts a table's rows ("": this region's dedupe rows).
func tableRows(t *testing.T, f *retFixture, table string) int {
	t.Helper()
	var n int
	var err error
	if table == "" {
		n, err = f.st.DedupeRows(f.ctx)
	} else {
		n, err = f.st.TableRows(f.ctx, table)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// liveBytes flushes and compacts the keyspace and returns tablestats'
// "Space used (live)" per table.
func liveBytes(t *testing.T, ks string) map[string]int {
	t.Helper()
	script, err := filepath.Abs("../../scripts/servers.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"flush", ks}, {"compact", ks}} {
		if out, err := exec.Command("bash", append([]string{script, "nodetool"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("nodetool %v: %v\n%s", args, err, out)
		}
	}
	out, err := exec.Command("bash", script, "nodetool", "tablestats", ks).Output()
	if err != nil {
		t.Fatalf("nodetool tablestats: %v", err)
	}
	sizes := map[string]int{}
	table := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "Table:"); ok {
			table = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Space used (live):"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("tablestats line %q", line)
			}
			sizes[table] += n
		}
	}
	return sizes
}
