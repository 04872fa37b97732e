//go:build linux

package region_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/likes-dev/likes/auth"
)

// mountSmallFS mounts a size-limited tmpfs at a fresh folder: a real
// filesystem that fills up. It needs root (CI runs as root); elsewhere the
// test fails and says why instead of skipping silently.
func mountSmallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mounting a %s tmpfs at %s failed: %v (this test needs root, or CAP_SYS_ADMIN, to make a small real filesystem it can fill)", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

type httpAnswer struct {
	status     int
	code       string
	retryAfter string
	body       string
	took       time.Duration
}

func call(srvURL, method, path, user, key string) httpAnswer {
	req, _ := http.NewRequest(method, srvURL+path, nil)
	if user != "" {
		tok, _ := auth.Sign(secret, user, false, time.Hour, time.Now())
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	start := time.Now()
	c := &http.Client{Timeout: 30 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		return httpAnswer{status: -1, body: err.Error(), took: time.Since(start)}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := httpAnswer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), body: string(b), took: time.Since(start)}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		a.code = e.Error.Code
	}
	return a
}

// fill writes a file until the filesystem has at most leave bytes free (0:
// until it is full).
func fill(t *testing.T, path string, leave uint64) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 256<<10)
	var n int64
	for i := 0; i < 4096; i++ {
		if leave > 0 {
			var st syscall.Statfs_t
			if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
				t.Fatal(err)
			}
			if st.Bavail*uint64(st.Bsize) <= leave {
				return n
			}
		}
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the filesystem never filled up")
	return n
}

// TestDiskFullUnderLoad fills a region's real (small) filesystem to 100 %
// while a load generator likes items: writes get 503 storage_unavailable with
// Retry-After at once (never hang), /readyz turns 503 with the reason, count
// reads keep serving; when space is freed the region writes again by itself,
// every refused like retried with its key lands, counts equal the LIKED
// edges, and a restart keeps every acknowledged like.
func TestDiskFullUnderLoad(t *testing.T) {
	dir := mountSmallFS(t, "48m")
	cfg := config(dir)
	cfg.MinFreeBytes = 8 << 20
	r, srv := open(t, cfg)
	items := []string{"i0", "i1", "i2"}

	type like struct{ user, item, key string }
	var mu sync.Mutex
	var acked, refused []like
	var slowRefusal time.Duration
	other := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l := like{user: fmt.Sprintf("w%du%d", w, i), item: items[i%len(items)], key: fmt.Sprintf("k%d-%d", w, i)}
				a := call(srv.URL, "POST", "/v1/items/"+l.item+"/likes", l.user, l.key)
				mu.Lock()
				switch {
				case a.status == 200:
					acked = append(acked, l)
				case a.status == 503 && a.code == "storage_unavailable":
					refused = append(refused, l)
					slowRefusal = max(slowRefusal, a.took)
					if a.retryAfter == "" {
						other["503 without Retry-After"]++
					}
				default:
					other[fmt.Sprintf("%d %s", a.status, a.code)]++
				}
				mu.Unlock()
			}
		}()
	}
	stopLoad := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopLoad()
	waitFor := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for i := 0; ; i++ {
			if cond() {
				return
			}
			if time.Now().After(deadline) || i > 100000 {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond) // polling interval, not a wait for an event
		}
	}
	waitFor("some acknowledged likes", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= 200 })

	// Below the watermark first: refused before Pebble meets ENOSPC.
	filler := filepath.Join(dir, "filler")
	filled := fill(t, filler, 6<<20)
	t.Logf("filled the filesystem with %d MiB, 6 MiB left", filled>>20)
	waitFor("/readyz to fail", 10*time.Second, func() bool { return call(srv.URL, "GET", "/readyz", "", "").status == 503 })
	ready := call(srv.URL, "GET", "/readyz", "", "")
	if ready.code != "not_ready" || !strings.Contains(ready.body, "free disk space") {
		t.Fatalf("/readyz below the watermark: %+v", ready)
	}
	if h := r.Store.Health(); h.Writable || h.RestartRequired || !strings.Contains(h.Reason, "watermark") {
		t.Fatalf("health below the watermark: %+v", h)
	}
	// Then completely full.
	filled += fill(t, filler+"2", 0)
	t.Logf("filled the filesystem with %d MiB: full", filled>>20)
	waitFor("refused likes under load", 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(refused) >= 200 })
	a := call(srv.URL, "POST", "/v1/items/i0/likes", "probe", "probe-key")
	if a.status != 503 || a.code != "storage_unavailable" || a.retryAfter == "" || a.took > time.Second {
		t.Fatalf("a like on a full disk: %+v", a)
	}
	if c := call(srv.URL, "GET", "/v1/items/i0/count", "", ""); c.status != 200 {
		t.Fatalf("count read on a full disk: %+v", c)
	}
	h := r.Store.Health()
	t.Logf("full: health %+v", h)
	if m := call(srv.URL, "GET", "/metrics", "", ""); !strings.Contains(m.body, "likes_storage_writable 0") || !strings.Contains(m.body, "likes_storage_faults_total 1") {
		t.Fatalf("metrics while full do not say so: %v", m.status)
	}

	for _, f := range []string{filler, filler + "2"} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("/readyz to pass again", 30*time.Second, func() bool { return call(srv.URL, "GET", "/readyz", "", "").status == 200 })
	waitFor("likes acknowledged again", 20*time.Second, func() bool {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		return call(srv.URL, "POST", "/v1/items/i1/likes", "after", "after-key").status == 200 && n > 0
	})
	stopLoad()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d acknowledged, %d refused (slowest refusal %v), other answers %v", len(acked), len(refused), slowRefusal, other)
	if slowRefusal > 2*time.Second {
		t.Fatalf("a refusal took %v: writes were not refused fast", slowRefusal)
	}
	if len(other) > 0 {
		t.Fatalf("answers other than 200 and 503 storage_unavailable: %v", other)
	}
	// Clients retry refused likes with their keys; then every like is in.
	want := map[string]int64{"i0": 0, "i1": 1, "i2": 0}
	for _, l := range append(append([]like(nil), acked...), refused...) {
		want[l.item]++
	}
	for _, l := range refused {
		if a := call(srv.URL, "POST", "/v1/items/"+l.item+"/likes", l.user, l.key); a.status != 200 {
			t.Fatalf("retrying a refused like after recovery: %+v", a)
		}
	}
	if got := settled(t, r, items, time.Now()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts after recovery %v, want %v", got, want)
	}
	srv.Close()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2, _ := open(t, cfg)
	if got := settled(t, r2, items, time.Now()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts after a restart %v, want %v", got, want)
	}
	for _, l := range acked {
		e, ok, err := r2.Store.Edge(context.Background(), l.item, l.user)
		if err != nil || !ok || e.State.String() != "LIKED" {
			t.Fatalf("acknowledged like %v lost after restart: %v %v %v", l, e, ok, err)
		}
	}
}
