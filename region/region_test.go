package region_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/edge"
	"github.com/likes-dev/likes/region"
)

var secret = []byte("region-test-secret")

func config(dir string) region.Config {
	return region.Config{
		Name: "us", DataDir: dir, Partitions: 4, Window: 10 * time.Millisecond,
		Secret: secret, UserRate: -1,
	}
}

func open(t *testing.T, cfg region.Config) (*region.Region, *httptest.Server) {
	t.Helper()
	r, err := region.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	srv := httptest.NewServer(r.API)
	t.Cleanup(func() {
		srv.Close()
		_ = r.Close()
	})
	return r, srv
}

// write sends a like (user likes item) or an unlike and returns the answer.
func write(t *testing.T, srv *httptest.Server, user, item, key string, like bool) (edge.Answer, error) {
	tok, err := auth.Sign(secret, user, false, time.Hour, time.Now())
	if err != nil {
		return edge.Answer{}, err
	}
	method, path := "POST", srv.URL+"/v1/items/"+item+"/likes"
	if !like {
		method, path = "DELETE", srv.URL+"/v1/items/"+item+"/likes/"+user
	}
	req, _ := http.NewRequest(method, path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Idempotency-Key", key)
	res, err := srv.Client().Do(req)
	if err != nil {
		return edge.Answer{}, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return edge.Answer{}, fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	var a edge.Answer
	err = json.Unmarshal(b, &a)
	return a, err
}

// settled polls the region's counts until their asOf covers `after`, then
// returns them.
func settled(t *testing.T, r *region.Region, items []string, after time.Time) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	deadline := time.Now().Add(20 * time.Second)
	for _, item := range items {
		for {
			res, err := r.Counts.Count(context.Background(), item)
			if err != nil {
				t.Fatal(err)
			}
			if res.AsOf.UnixMilli() >= after.UnixMilli()+2 {
				out[item] = res.Count
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("count of %s never caught up with %v (asOf %v)", item, after, res.AsOf)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return out
}

func TestRestartKeepsEveryAcknowledgedLike(t *testing.T) {
	dir := t.TempDir()
	cfg := config(dir)
	r1, srv1 := open(t, cfg)

	const items, users = 24, 6
	names := make([]string, items)
	want := map[string]int64{}
	liked := map[[2]string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, items*users)
	for i := range names {
		names[i] = fmt.Sprintf("item-%02d", i)
	}
	// Item i is liked by (i % users)+1 users; every third item also sees one
	// like-then-unlike.
	for i, item := range names {
		for u := 0; u <= i%users; u++ {
			user := fmt.Sprint("user", u)
			wg.Go(func() {
				if _, err := write(t, srv1, user, item, "k-"+item, true); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				want[item]++
				liked[[2]string{item, user}] = true
				mu.Unlock()
			})
		}
		if i%3 == 0 {
			wg.Go(func() {
				if _, err := write(t, srv1, "flipper", item, "l-"+item, true); err != nil {
					errs <- err
					return
				}
				if _, err := write(t, srv1, "flipper", item, "u-"+item, false); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Let the first half settle, and close right after acknowledging the rest:
	// their events are durable in the log but maybe not yet in any cell.
	before := settled(t, r1, names[:items/2], time.Now())
	for _, item := range names[:items/2] {
		if before[item] != want[item] {
			t.Fatalf("before restart: %s = %d, want %d", item, before[item], want[item])
		}
	}
	late := "late-item"
	if _, err := write(t, srv1, "user0", late, "late-key", true); err != nil {
		t.Fatal(err)
	}
	want[late] = 1
	liked[[2]string{late, "user0"}] = true
	names = append(names, late)
	srv1.Close()
	if err := r1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r1.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	reopened := time.Now()
	r2, srv2 := open(t, cfg)
	got := settled(t, r2, names, reopened)
	for _, item := range names {
		if got[item] != want[item] {
			t.Errorf("after restart: %s = %d, want %d", item, got[item], want[item])
		}
	}
	for k := range liked {
		ok, err := r2.Service.Liked(context.Background(), k[1], k[0])
		if err != nil || !ok {
			t.Errorf("after restart: button (%s, %s) = %v, %v; want liked", k[0], k[1], ok, err)
		}
	}
	if ok, _ := r2.Service.Liked(context.Background(), "flipper", names[0]); ok {
		t.Error("after restart: an acknowledged unlike came back liked")
	}
	// Idempotency records survived too: a retry of a pre-restart key replays.
	a, err := write(t, srv2, "user0", late, "late-key", true)
	if err != nil || !a.Liked || !a.Changed {
		t.Fatalf("replay after restart = %+v, %v; want the stored {liked, changed}", a, err)
	}
	a, err = write(t, srv2, "user0", late, "late-key-2", true)
	if err != nil || a.Changed {
		t.Fatalf("new key on a liked edge after restart = %+v, %v; want changed=false", a, err)
	}
	if c := settled(t, r2, []string{late}, time.Now())[late]; c != 1 {
		t.Fatalf("count of %s after retries = %d, want 1", late, c)
	}
}

func TestRestartResumesErasure(t *testing.T) {
	dir := t.TempDir()
	cfg := config(dir)
	cfg.EraseRate = 1
	r1, srv1 := open(t, cfg)
	const n = 130
	items := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range items {
		items[i] = fmt.Sprintf("e%03d", i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := write(t, srv1, "victim", items[i], "v-"+items[i], true); err != nil {
				errs <- err
				return
			}
			if _, err := write(t, srv1, "keeper", items[i], "k-"+items[i], true); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	job, err := r1.Eraser.Start(context.Background(), "victim")
	if err != nil || job.State != edge.ErasureRunning {
		t.Fatalf("Start = %+v, %v; want a running job", job, err)
	}
	srv1.Close()
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.EraseRate = 0 // default
	r2, _ := open(t, cfg)
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, ok, err := r2.Eraser.Status(context.Background(), "victim")
		if err != nil || !ok {
			t.Fatalf("Status = %v, %v", ok, err)
		}
		if j.State == edge.ErasureDone {
			job = j
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("erasure did not resume after restart: %+v", j)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for item, c := range settled(t, r2, items, time.Now()) {
		if c != 1 {
			t.Fatalf("%s = %d after the resumed erasure, want 1", item, c)
		}
	}
	// The report survives the restart exactly: progress made before Close is
	// saved, so no erased like is forgotten (an ERASED edge cannot tell later
	// whether it was liked).
	if job.Edges != n || job.Unliked != n {
		t.Fatalf("resumed job = %+v, want %d edges and %d likes removed", job, n, n)
	}
}

func TestOpenValidatesAndRefusesAnotherLayout(t *testing.T) {
	dir := t.TempDir()
	for name, mod := range map[string]func(*region.Config){
		"no name":   func(c *region.Config) { c.Name = "" },
		"no dir":    func(c *region.Config) { c.DataDir = "" },
		"no secret": func(c *region.Config) { c.Secret = nil },
	} {
		cfg := config(dir)
		mod(&cfg)
		if r, err := region.Open(context.Background(), cfg); err == nil {
			_ = r.Close()
			t.Errorf("%s: Open accepted %+v", name, cfg)
		}
	}
	r, err := region.Open(context.Background(), config(dir))
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() != "us" {
		t.Fatalf("Name = %q", r.Name())
	}
	_ = r.Close()
	other := config(dir)
	other.Partitions = 8
	if r, err := region.Open(context.Background(), other); err == nil {
		_ = r.Close()
		t.Fatal("reopened a 4-partition folder with 8 partitions")
	} else if !strings.Contains(err.Error(), "partitions") {
		t.Logf("layout error: %v", err)
	}
	// The refused open released the folder.
	r, err = region.Open(context.Background(), config(dir))
	if err != nil {
		t.Fatalf("reopen after a refused open: %v", err)
	}
	_ = r.Close()
}

// TestDrainTurnsReadinessOff: a region that is stopping answers /readyz 503
// with the reason, while it still serves the requests that reach it.
func TestDrainTurnsReadinessOff(t *testing.T) {
	r, srv := open(t, config(t.TempDir()))
	get := func(path string) (int, string) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz before the drain: %d %s", code, body)
	}
	r.Drain()
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Fatalf("/readyz while draining: %d %s, want 503 naming the drain", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while draining: %d, want 200 (liveness)", code)
	}
	if _, err := write(t, srv, "alice", "i1", "k1", true); err != nil {
		t.Fatalf("a write that reaches a draining region: %v", err)
	}
}
