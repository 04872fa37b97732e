package pebblestore

import (
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/likes-dev/likes/edge"
)

// TestFatalfNeverReturns: Pebble's Fatalf under one of the store's writes
// becomes that write's error (ErrFatal, the store failed); in one of Pebble's
// own goroutines it parks the goroutine (the process lives on: in `likesd dev`
// the other regions keep serving) and the store asks for a restart.
func TestFatalfNeverReturns(t *testing.T) {
	s, err := Open(Options{Dir: "/db", FS: vfs.NewMem(), Region: "r1", Partitions: 2, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	l := pebbleLogger{s: s}
	err = s.guardWrite("test", func() error {
		l.Fatalf("pebble: fatal commit error: %v", errors.New("no space left on device"))
		t.Error("Fatalf returned under the guard")
		return nil
	})
	if !errors.Is(err, ErrFatal) || !errors.Is(err, edge.ErrStorageUnavailable) {
		t.Fatalf("guarded Fatalf: %v", err)
	}
	if h := s.Health(); h.Writable || h.RestartRequired {
		t.Fatalf("health after a guarded Fatalf: %+v", h)
	}
	returned := make(chan struct{})
	go func() {
		l.Fatalf("MANIFEST sync failed: %v", errors.New("input/output error"))
		close(returned)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !s.Health().RestartRequired {
		if time.Now().After(deadline) {
			t.Fatal("a background Fatalf did not ask for a restart")
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	select {
	case <-returned:
		t.Fatal("Fatalf returned in a background goroutine")
	default:
	}
	// The database is left unclosed (it could hang); Close says so.
	if err := s.Close(); !errors.Is(err, ErrFatal) {
		t.Fatalf("Close of a store that needs a restart: %v", err)
	}
}
