package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/region"
	"github.com/likes-dev/likes/store/pebblestore"
)

// TestOnlineBackupUnderLoad: `likectl backup --url` takes a consistent
// checkpoint of a running region while likes keep arriving; the restored
// folder holds every like acknowledged before the backup began, and its
// counts equal its LIKED edges (a checkpoint is one instant of the store,
// never half a write). A non-admin token is refused, and a stream that is
// not a backup leaves no region folder behind.
func TestOnlineBackupUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a region under load")
	}
	secret := strings.Repeat("b", 32)
	t.Setenv("LIKES_AUTH_SECRET", secret)
	r, err := region.Open(context.Background(), region.Config{
		Name: "us", DataDir: t.TempDir(), Partitions: 4, Window: 10 * time.Millisecond,
		Secret: []byte(secret), UserRate: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.API)
	defer func() { srv.Close(); _ = r.Close() }()

	const items = 5
	like := func(n int) error {
		user := fmt.Sprintf("user-%d", n)
		tok, err := auth.Sign([]byte(secret), user, false, time.Hour, time.Now())
		if err != nil {
			return err
		}
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/items/item-%d/likes", srv.URL, n%items), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d", n))
		res, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, res.Body)
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("like %d: %s", n, res.Status)
		}
		return nil
	}
	const before = 200
	for n := 0; n < before; n++ {
		if err := like(n); err != nil {
			t.Fatal(err)
		}
	}
	// Load during the backup: bounded in count, stopped when the backup ends.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var during atomic.Int64
	wg.Go(func() {
		for n := before; n < before+5000 && !stop.Load(); n++ {
			if err := like(n); err != nil {
				t.Error(err)
				return
			}
			during.Add(1)
		}
	})
	out := filepath.Join(t.TempDir(), "bk")
	var o, e bytes.Buffer
	err = run(context.Background(), []string{"backup", "--url", srv.URL, "--out", out, "--etcd-snapshot=false"}, &o, &e)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("backup: %v\n%s%s", err, o.String(), e.String())
	}
	if !strings.Contains(o.String(), "region us: online checkpoint from") || !strings.Contains(e.String(), "backup: 1/1 regions streamed (us: ") {
		t.Errorf("backup output:\n%s---\n%s", o.String(), e.String())
	}
	t.Logf("%d likes acknowledged during the backup", during.Load())
	if ents, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".us.backup-*")); len(ents) != 0 {
		t.Errorf("checkpoint folders left behind: %v", ents)
	}

	data2 := t.TempDir()
	o.Reset()
	e.Reset()
	if err := run(context.Background(), []string{"restore", "--from", out, "--data", data2, "--region", "us"}, &o, &e); err != nil {
		t.Fatalf("restore: %v\n%s%s", err, o.String(), e.String())
	}
	st, err := pebblestore.Open(pebblestore.Options{Dir: filepath.Join(data2, "us"), Region: "us", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for n := 0; n < before; n++ {
		ed, ok, err := st.Edge(ctx, fmt.Sprintf("item-%d", n%items), fmt.Sprintf("user-%d", n))
		if err != nil || !ok || ed.State != crdt.Liked {
			t.Fatalf("like %d acknowledged before the backup is not in it: %+v %v %v", n, ed, ok, err)
		}
	}
	total := 0
	for i := 0; i < items; i++ {
		item := fmt.Sprintf("item-%d", i)
		liked := 0
		for n := 0; n < before+int(during.Load()); n++ {
			if n%items != i {
				continue
			}
			if ed, ok, _ := st.Edge(ctx, item, fmt.Sprintf("user-%d", n)); ok && ed.State == crdt.Liked {
				liked++
			}
		}
		c, err := st.Count(ctx, item)
		if err != nil || c != int64(liked) {
			t.Fatalf("restored %s: count %d, LIKED edges %d (%v)", item, c, liked, err)
		}
		total += liked
	}
	t.Logf("restored %d likes (%d before the backup)", total, before)

	// A user's token is not an admin's.
	t.Setenv("LIKES_AUTH_SECRET", "not the region's secret at all, no")
	err = run(context.Background(), []string{"backup", "--url", srv.URL, "--out", filepath.Join(t.TempDir(), "bk"), "--etcd-snapshot=false"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("backup with a foreign token: %v", err)
	}
	// Something that is not a backup stream.
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-tar")
		_, _ = w.Write([]byte("definitely not a tar stream"))
	}))
	defer fake.Close()
	out3 := filepath.Join(t.TempDir(), "bk")
	err = run(context.Background(), []string{"backup", "--url", fake.URL, "--out", out3, "--etcd-snapshot=false"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "bad backup stream") {
		t.Fatalf("a garbage stream: %v", err)
	}
	if ents, _ := os.ReadDir(out3); len(ents) != 0 {
		t.Fatalf("a refused stream left %v", ents)
	}
	// Usage errors exit 2 without network.
	if err := run(context.Background(), []string{"backup", "--url", srv.URL, "--regions", "us", "--out", filepath.Join(t.TempDir(), "x")}, io.Discard, io.Discard); err == nil || exitCode(err) != 2 {
		t.Fatalf("--url with --regions: %v (exit %d)", err, exitCode(err))
	}
}
