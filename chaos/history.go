package chaos

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"time"
)

// Op kinds.
const (
	KindLike    = "like"
	KindUnlike  = "unlike"
	KindRetract = "retract"
	KindErase   = "erase"
)

// Targets of ops: the edge state an op asks for.
const (
	TargetLiked   = "liked"
	TargetUnliked = "unliked"
	TargetErased  = "erased" // every edge of the user
)

// Outcomes of ops and classes of attempts.
const (
	OutcomeAck           = "ack"           // acknowledged: it took effect
	OutcomeReject        = "reject"        // definitely refused: no effect
	OutcomeIndeterminate = "indeterminate" // may or may not have taken effect
	OutcomeUnsent        = "unsent"        // never sent (the run ended first)
)

// Op is one distinct client operation: one Idempotency-Key (or, for
// retractions and erasures, one request retried as is). Attempts are its sends;
// stale retries after later ops are attempts too, never new ops.
type Op struct {
	ID     int64  `json:"id"`
	Client int    `json:"client"`
	User   string `json:"user"`
	Item   string `json:"item,omitempty"`
	Kind   string `json:"kind"`
	Key    string `json:"key,omitempty"`
	Target string `json:"target"`
	// Invoke is the start of the first attempt; Ack the end of the first
	// acknowledged attempt (zero when none).
	Invoke    time.Time `json:"invoke"`
	Ack       time.Time `json:"ack,omitzero"`
	AckRegion string    `json:"ackRegion,omitempty"`
	Outcome   string    `json:"outcome"`
	Attempts  int       `json:"attempts"`
	LastCode  string    `json:"lastCode,omitempty"`
	// Duplicates is how many extra concurrent copies the first send had.
	Duplicates int `json:"duplicates,omitempty"`
	// PostErasure marks a write sent as a user whose erasure was acknowledged.
	PostErasure bool `json:"postErasure,omitempty"`
	// StaleRetries counts sends of this op's key after a later op of the same
	// edge was acknowledged (deep-dive 1).
	StaleRetries int `json:"staleRetries,omitempty"`
}

// Attempt is one send of an op.
type Attempt struct {
	Op      int64     `json:"op"`
	N       int       `json:"n"`
	Region  string    `json:"region"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Status  int       `json:"status,omitempty"`
	Code    string    `json:"code,omitempty"`
	Err     string    `json:"err,omitempty"`
	Class   string    `json:"class"`
	Stale   bool      `json:"stale,omitempty"`
	Dup     bool      `json:"dup,omitempty"`
	Liked   *bool     `json:"liked,omitempty"`
	Changed *bool     `json:"changed,omitempty"`
	session string    // the answer's Likes-Session token
}

// ButtonRead is the actor's button read at another region right after their
// acknowledged write, carrying the Likes-Session token the write answered.
type ButtonRead struct {
	Op     int64     `json:"op"`
	User   string    `json:"user"`
	Item   string    `json:"item"`
	Region string    `json:"region"`
	Want   bool      `json:"want"` // the write's target: liked
	Liked  bool      `json:"liked"`
	Source string    `json:"source,omitempty"`
	Sent   time.Time `json:"sent"`
	Recv   time.Time `json:"recv"`
}

// Sample is one count read during the run.
type Sample struct {
	Region string    `json:"region"`
	Item   string    `json:"item"`
	Count  int64     `json:"count"`
	AsOf   time.Time `json:"asOf"`
	Sent   time.Time `json:"sent"`
	Recv   time.Time `json:"recv"`
}

// NemesisEvent is one fault as executed.
type NemesisEvent struct {
	Kind   string    `json:"kind"`
	Region string    `json:"region,omitempty"`
	Detail string    `json:"detail,omitempty"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end,omitzero"`
	Err    string    `json:"err,omitempty"`
}

// History writes the history file: one JSON object per line, each with a
// "type" (attempt, op, read, nemesis, pin, note) and the record.
type History struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	enc *json.Encoder
	err error
}

// NewHistory creates the history file at path.
func NewHistory(path string) (*History, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	return &History{f: f, w: w, enc: json.NewEncoder(w)}, nil
}

// Write appends one record.
func (h *History) Write(typ string, rec any) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return
	}
	h.err = h.enc.Encode(struct {
		Type string    `json:"type"`
		At   time.Time `json:"at"`
		Rec  any       `json:"rec"`
	}{typ, time.Now(), rec})
}

// Close flushes and closes the file.
func (h *History) Close() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f == nil {
		return h.err
	}
	if err := h.w.Flush(); err != nil && h.err == nil {
		h.err = err
	}
	if err := h.f.Close(); err != nil && h.err == nil {
		h.err = err
	}
	h.f = nil
	return h.err
}
