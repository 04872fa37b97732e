package clustermeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Layout is the version of the etcd key layout (under the cluster's prefix:
// meta/cluster, meta/ranges, meta/homes, pins/NNNNN, regions/NAME,
// controller/election/) this build writes and reads.
const Layout = 1

// Bounds of the parameters.
const (
	MaxRanges   = 100000 // what the 5-digit pin keys can hold
	MaxLeaseTTL = time.Hour
	MaxMaxSkew  = time.Minute
	// MaxSize bounds the encoded value.
	MaxSize = 4096
)

var (
	// ErrInvalid is wrapped by every refused metadata value.
	ErrInvalid = errors.New("clustermeta: invalid cluster metadata")
	// ErrNewerLayout is wrapped when the metadata was written under a key
	// layout this build does not know.
	ErrNewerLayout = errors.New("clustermeta: cluster metadata written by a newer build")
	// ErrMismatch is wrapped by Check when parameters disagree with the
	// cluster's.
	ErrMismatch = errors.New("clustermeta: parameters disagree with the cluster's")
)

// Meta is the cluster metadata.
type Meta struct {
	// Layout is the key layout version (Layout for this build).
	Layout int
	// Ranges is R, the number of user ranges.
	Ranges int
	// LeaseTTL is the region lease TTL (a whole number of seconds).
	LeaseTTL time.Duration
	// MaxSkew is the assumed bound on clock skew between regions; moves set
	// notBefore = now + LeaseTTL + MaxSkew.
	MaxSkew time.Duration
	// CreatedAt is when the cluster was created (informational, ms precision;
	// zero if unknown).
	CreatedAt time.Time
}

// wire is the stored JSON. Field names are stable: they are the documented
// format of the etcd value (and of `likectl cluster -o json`).
type wire struct {
	Layout     int    `json:"layout"`
	Ranges     int    `json:"ranges"`
	LeaseTTLMs int64  `json:"leaseTTLMs"`
	MaxSkewMs  int64  `json:"maxSkewMs"`
	CreatedAt  string `json:"createdAt,omitempty"`
}

// Validate checks every parameter against its bounds.
func (m Meta) Validate() error {
	switch {
	case m.Layout < 1:
		return fmt.Errorf("%w: layout %d (want %d)", ErrInvalid, m.Layout, Layout)
	case m.Layout > Layout:
		return fmt.Errorf("%w: layout %d, this build knows up to %d: upgrade it", ErrNewerLayout, m.Layout, Layout)
	case m.Ranges < 1 || m.Ranges > MaxRanges:
		return fmt.Errorf("%w: ranges %d not in [1, %d]", ErrInvalid, m.Ranges, MaxRanges)
	case m.LeaseTTL < time.Second || m.LeaseTTL > MaxLeaseTTL || m.LeaseTTL%time.Second != 0:
		return fmt.Errorf("%w: lease TTL %v is not a whole number of seconds in [1s, %v]", ErrInvalid, m.LeaseTTL, MaxLeaseTTL)
	case m.MaxSkew < 0 || m.MaxSkew > MaxMaxSkew || m.MaxSkew%time.Millisecond != 0:
		return fmt.Errorf("%w: max skew %v is not a whole number of milliseconds in [0, %v]", ErrInvalid, m.MaxSkew, MaxMaxSkew)
	}
	return nil
}

// Encode validates m and returns its stored JSON.
func Encode(m Meta) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	w := wire{Layout: m.Layout, Ranges: m.Ranges, LeaseTTLMs: m.LeaseTTL.Milliseconds(), MaxSkewMs: m.MaxSkew.Milliseconds()}
	if !m.CreatedAt.IsZero() {
		w.CreatedAt = m.CreatedAt.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)
	}
	return json.Marshal(w)
}

// Decode parses and validates a stored value, strictly (see the package
// documentation).
func Decode(b []byte) (Meta, error) {
	if len(b) == 0 {
		return Meta{}, fmt.Errorf("%w: empty value", ErrInvalid)
	}
	if len(b) > MaxSize {
		return Meta{}, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalid, len(b), MaxSize)
	}
	// A newer layout may carry other fields: look at the version first, so
	// the error says "upgrade" rather than "unknown field".
	var probe struct {
		Layout json.RawMessage `json:"layout"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var layout int
	if len(probe.Layout) == 0 {
		return Meta{}, fmt.Errorf("%w: no layout field", ErrInvalid)
	}
	if err := json.Unmarshal(probe.Layout, &layout); err != nil {
		return Meta{}, fmt.Errorf("%w: layout: %v", ErrInvalid, err)
	}
	if layout > Layout {
		return Meta{}, fmt.Errorf("%w: layout %d, this build knows up to %d: upgrade it", ErrNewerLayout, layout, Layout)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Meta{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalid)
	}
	if err := requireFields(b); err != nil {
		return Meta{}, err
	}
	const maxMs = int64(MaxLeaseTTL / time.Millisecond)
	if w.LeaseTTLMs < 0 || w.LeaseTTLMs > maxMs || w.MaxSkewMs < 0 || w.MaxSkewMs > maxMs {
		return Meta{}, fmt.Errorf("%w: leaseTTLMs %d or maxSkewMs %d out of bounds", ErrInvalid, w.LeaseTTLMs, w.MaxSkewMs)
	}
	m := Meta{Layout: w.Layout, Ranges: w.Ranges, LeaseTTL: time.Duration(w.LeaseTTLMs) * time.Millisecond,
		MaxSkew: time.Duration(w.MaxSkewMs) * time.Millisecond}
	if w.CreatedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, w.CreatedAt)
		if err != nil {
			return Meta{}, fmt.Errorf("%w: createdAt: %v", ErrInvalid, err)
		}
		m.CreatedAt = t.UTC()
	}
	if err := m.Validate(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

// requireFields refuses a value that leaves out a parameter (a zero would
// otherwise read as a default nobody chose).
func requireFields(b []byte) error {
	var present map[string]json.RawMessage
	if err := json.Unmarshal(b, &present); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var missing []string
	for _, k := range []string{"layout", "ranges", "leaseTTLMs", "maxSkewMs"} {
		if _, ok := present[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s", ErrInvalid, strings.Join(missing, ", "))
	}
	return nil
}

// Diff lists the parameters (not CreatedAt) in which o differs from m, as
// "name: m's value (cluster) vs o's value" phrases; nil when they agree.
func (m Meta) Diff(o Meta) []string {
	var d []string
	if m.Layout != o.Layout {
		d = append(d, fmt.Sprintf("layout: cluster %d, given %d", m.Layout, o.Layout))
	}
	if m.Ranges != o.Ranges {
		d = append(d, fmt.Sprintf("ranges: cluster %d, given %d", m.Ranges, o.Ranges))
	}
	if m.LeaseTTL != o.LeaseTTL {
		d = append(d, fmt.Sprintf("lease TTL: cluster %v, given %v", m.LeaseTTL, o.LeaseTTL))
	}
	if m.MaxSkew != o.MaxSkew {
		d = append(d, fmt.Sprintf("max skew: cluster %v, given %v", m.MaxSkew, o.MaxSkew))
	}
	return d
}

// Params are parameters a process was configured with; a zero field means
// "not given" and is not compared.
type Params struct {
	Ranges   int
	LeaseTTL time.Duration
	MaxSkew  time.Duration
}

// Check returns an error wrapping ErrMismatch that names every parameter of p
// (those given) that disagrees with m, or nil. A process (likesd, likectl)
// calls it with its flags before it acts on the cluster.
func (m Meta) Check(p Params) error {
	o := m
	if p.Ranges != 0 {
		o.Ranges = p.Ranges
	}
	if p.LeaseTTL != 0 {
		o.LeaseTTL = p.LeaseTTL
	}
	if p.MaxSkew != 0 {
		o.MaxSkew = p.MaxSkew
	}
	if d := m.Diff(o); len(d) > 0 {
		return fmt.Errorf("%w: %s", ErrMismatch, strings.Join(d, "; "))
	}
	return nil
}
