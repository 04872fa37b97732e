package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/likes-dev/likes/clock"
)

// RegionView is one region as the console shows it. Detailed is false for a
// region this process only knows from etcd (likesd run shows its own region
// in detail, the others' lease state only).
type RegionView struct {
	Name     string `json:"name"`
	Detailed bool   `json:"detailed"`
	// Live: its lease key exists in etcd; Draining: it is handing off.
	Live     bool `json:"live"`
	Draining bool `json:"draining"`
	// LeaseAgeMs is how long ago its last lease keepalive succeeded (-1:
	// unknown); LeaseOK whether it can prove its lease and pin table now.
	LeaseAgeMs int64  `json:"leaseAgeMs"`
	LeaseOK    bool   `json:"leaseOk"`
	LeaseError string `json:"leaseError,omitempty"`
	// Watermarks of every region as known here, and their minimum (asOf).
	Watermarks    map[string]time.Time `json:"watermarks,omitempty"`
	AsOf          time.Time            `json:"asOf"`
	StalenessMs   int64                `json:"stalenessMs"`
	AggregatorLag uint64               `json:"aggregatorLagEvents"`
	RelayLag      *uint64              `json:"relayLagEvents,omitempty"`
	Peers         []PeerView           `json:"peers,omitempty"`
	PinsOwned     int                  `json:"pinsOwned"`
	CatchingUp    int                  `json:"pinsCatchingUp"`
	Engines       string               `json:"engines,omitempty"`
	Error         string               `json:"error,omitempty"`
}

// PeerView is the replication stream from a region to one peer.
type PeerView struct {
	Region     string `json:"region"`
	Active     bool   `json:"active"`
	Handshaken bool   `json:"handshaken"`
	LagEvents  uint64 `json:"lagEvents"`
	// LagMs is now minus the watermark the peer last acknowledged (-1: none yet).
	LagMs  int64  `json:"lagMs"`
	Pushes uint64 `json:"pushes"`
}

// PinView is one range's pin.
type PinView struct {
	Range      uint32    `json:"range"`
	Region     string    `json:"region"`
	Epoch      uint64    `json:"epoch"`
	Home       string    `json:"home"`
	CatchingUp bool      `json:"catchingUp"`
	NotBefore  time.Time `json:"notBefore,omitzero"`
	From       string    `json:"from,omitempty"`
}

// State is what a Source reports.
type State struct {
	Regions []RegionView `json:"regions"`
	// Pins, by range; empty for a region without a cluster.
	Pins []PinView `json:"pins"`
	// Live names the regions whose lease exists (nil: unknown).
	Live   map[string]bool `json:"-"`
	Errors []string        `json:"errors,omitempty"`
}

// Source reads the cluster's state.
type Source interface {
	ConsoleState(ctx context.Context) State
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context) State

// ConsoleState implements Source.
func (f SourceFunc) ConsoleState(ctx context.Context) State { return f(ctx) }

// Event is a change of the pin table the console saw.
type Event struct {
	Time  time.Time `json:"time"`
	Kind  string    `json:"kind"` // "move", "failover", "failback" (home again) or "caught-up"
	Range uint32    `json:"range"`
	From  string    `json:"from,omitempty"`
	To    string    `json:"to"`
	Epoch uint64    `json:"epoch"`
	// Planned: the new pin waited for the new owner to catch up.
	Planned bool `json:"planned,omitempty"`
}

// Snapshot is what /ui/api/state answers.
type Snapshot struct {
	Now     time.Time    `json:"now"`
	Polled  time.Time    `json:"polled"`
	Regions []RegionView `json:"regions"`
	Pins    []PinView    `json:"pins"`
	Events  []Event      `json:"events"` // newest first
	Errors  []string     `json:"errors,omitempty"`
}

// Config configures a Console.
type Config struct {
	Source Source
	// Interval between polls (default 500ms; the page reloads every second).
	Interval time.Duration
	// MaxEvents bounds the ring (default 200).
	MaxEvents int
	// Timeout bounds one poll (default 3s).
	Timeout time.Duration
	Clock   clock.Clock
	Logger  *slog.Logger
}

// ErrConfig prefixes a refused Config.
var ErrConfig = errors.New("console: bad configuration")

// Console polls a Source and serves the page.
type Console struct {
	cfg    Config
	mu     sync.Mutex
	snap   Snapshot
	pins   map[uint32]PinView // the last pin table, nil before the first
	events []Event            // ring, oldest first
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start validates cfg, polls once, and starts the loop.
func Start(cfg Config) (*Console, error) {
	if cfg.Source == nil {
		return nil, errors.Join(ErrConfig, errors.New("console: Config needs Source"))
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = 200
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Console{cfg: cfg, cancel: cancel, done: make(chan struct{})}
	c.Poll(ctx)
	go c.loop(ctx)
	return c, nil
}

func (c *Console) loop(ctx context.Context) {
	defer close(c.done)
	t := c.cfg.Clock.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			c.Poll(ctx)
		}
	}
}

// Poll reads the Source once and records what changed (the loop calls it;
// tests may too).
func (c *Console) Poll(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	st := c.cfg.Source.ConsoleState(pctx)
	cancel()
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(st.Pins) > 0 {
		next := make(map[uint32]PinView, len(st.Pins))
		for _, p := range st.Pins {
			next[p.Range] = p
			if c.pins == nil {
				continue
			}
			old, ok := c.pins[p.Range]
			switch {
			case !ok:
			case p.Epoch > old.Epoch && p.Region != old.Region:
				kind := "move"
				switch {
				case st.Live != nil && !st.Live[old.Region]:
					kind = "failover"
				case p.Home != "" && p.Region == p.Home:
					kind = "failback"
				}
				c.record(Event{Time: now, Kind: kind, Range: p.Range, From: old.Region, To: p.Region, Epoch: p.Epoch, Planned: p.CatchingUp})
			case p.Epoch == old.Epoch && old.CatchingUp && !p.CatchingUp:
				c.record(Event{Time: now, Kind: "caught-up", Range: p.Range, To: p.Region, Epoch: p.Epoch, Planned: true})
			}
		}
		c.pins = next
	}
	c.snap = Snapshot{Polled: now, Regions: st.Regions, Pins: st.Pins, Errors: st.Errors}
}

// record appends e to the ring (c.mu held).
func (c *Console) record(e Event) {
	if len(c.events) == c.cfg.MaxEvents {
		copy(c.events, c.events[1:])
		c.events = c.events[:len(c.events)-1]
	}
	c.events = append(c.events, e)
	c.cfg.Logger.Info("console: pin change", "kind", e.Kind, "range", e.Range, "from", e.From, "to", e.To, "epoch", e.Epoch)
}

// Snapshot is the latest state with the events, newest first.
func (c *Console) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.snap
	s.Now = c.cfg.Clock.Now()
	s.Events = make([]Event, 0, len(c.events))
	for i := len(c.events) - 1; i >= 0; i-- {
		s.Events = append(s.Events, c.events[i])
	}
	if s.Regions == nil {
		s.Regions = []RegionView{}
	}
	if s.Pins == nil {
		s.Pins = []PinView{}
	}
	return s
}

// Close stops the loop and waits for it. Idempotent.
func (c *Console) Close() {
	c.once.Do(func() {
		c.cancel()
		<-c.done
	})
}

//go:embed static
var static embed.FS

// Handler serves the page under /ui/ and its JSON at /ui/api/state.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(static, "static")
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	mux.Handle("GET /ui/", noCache(files))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	mux.HandleFunc("GET /ui/api/state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(c.Snapshot())
	})
	return mux
}

func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		h.ServeHTTP(w, r)
	})
}
