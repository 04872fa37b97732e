package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/likes-dev/likes/clock"
)

type fakeSource struct {
	mu sync.Mutex
	st State
}

func (f *fakeSource) ConsoleState(context.Context) State {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Pins = append([]PinView(nil), f.st.Pins...)
	return st
}

func (f *fakeSource) set(fn func(*State)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.st)
}

// TestEvents: the first table is a baseline; a move to a live region's
// range is a move, one away from a dead region a failover, a planned pin
// catching up is its own event; the ring keeps the newest MaxEvents.
func TestEvents(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	src := &fakeSource{st: State{
		Regions: []RegionView{{Name: "us", Live: true}, {Name: "eu", Live: true}},
		Pins:    []PinView{{Range: 0, Region: "us", Epoch: 1, Home: "us"}, {Range: 1, Region: "eu", Epoch: 1, Home: "eu"}},
		Live:    map[string]bool{"us": true, "eu": true},
	}}
	c, err := Start(Config{Source: src, Clock: clk, MaxEvents: 3, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if ev := c.Snapshot().Events; len(ev) != 0 {
		t.Fatalf("baseline made events: %v", ev)
	}
	src.set(func(s *State) { s.Pins[0] = PinView{Range: 0, Region: "eu", Epoch: 2, Home: "us", CatchingUp: true} })
	c.Poll(ctx)
	src.set(func(s *State) { s.Pins[0].CatchingUp = false })
	c.Poll(ctx)
	src.set(func(s *State) {
		s.Live = map[string]bool{"us": true}
		s.Pins[1] = PinView{Range: 1, Region: "us", Epoch: 2, Home: "eu"}
	})
	c.Poll(ctx)
	ev := c.Snapshot().Events
	want := []string{"failover 1 eu→us 2", "caught-up 0 →eu 2", "move 0 us→eu 2"}
	if len(ev) != len(want) {
		t.Fatalf("events %+v", ev)
	}
	for i, e := range ev {
		if got := e.Kind + " " + itoa(e.Range) + " " + e.From + "→" + e.To + " " + itoa(uint32(e.Epoch)); got != want[i] {
			t.Errorf("event %d: %s, want %s", i, got, want[i])
		}
	}
	if !ev[2].Planned {
		t.Error("the catching-up move is not planned")
	}
	src.set(func(s *State) {
		s.Live = map[string]bool{"us": true, "eu": true}
		s.Pins[0] = PinView{Range: 0, Region: "us", Epoch: 3, Home: "us"}
	})
	c.Poll(ctx)
	if ev := c.Snapshot().Events; len(ev) != 3 || ev[0].Epoch != 3 || ev[0].Kind != "failback" || ev[2].Kind != "caught-up" {
		t.Fatalf("ring after a fourth event: %+v", ev)
	}

	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/ui/api/state")
	if err != nil {
		t.Fatal(err)
	}
	var snap Snapshot
	if err := json.NewDecoder(res.Body).Decode(&snap); err != nil || len(snap.Pins) != 2 || len(snap.Regions) != 2 {
		t.Fatalf("state %+v, %v", snap, err)
	}
	_ = res.Body.Close()
	for path, want := range map[string]string{"/ui/": "operator console", "/ui/app.js": "api/state", "/ui/style.css": "#pin-grid"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, %.80q", path, res.StatusCode, b)
		}
	}
	c.Close()
	c.Close()
}

func itoa(v uint32) string {
	b, _ := json.Marshal(v)
	return string(b)
}
