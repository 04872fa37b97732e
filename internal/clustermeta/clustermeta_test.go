package clustermeta

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func valid() Meta {
	return Meta{Layout: Layout, Ranges: 256, LeaseTTL: 5 * time.Second, MaxSkew: 500 * time.Millisecond,
		CreatedAt: time.UnixMilli(1_700_000_000_123).UTC()}
}

func TestRoundTrip(t *testing.T) {
	m := valid()
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"layout":1,"ranges":256,"leaseTTLMs":5000,"maxSkewMs":500,"createdAt":"2023-11-14T22:13:20.123Z"}`
	if string(b) != want {
		t.Fatalf("Encode = %s, want %s", b, want)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got != m {
		t.Fatalf("Decode(Encode(m)) = %+v, want %+v", got, m)
	}
	m.CreatedAt = time.Time{}
	b, _ = Encode(m)
	if strings.Contains(string(b), "createdAt") {
		t.Fatalf("zero CreatedAt encoded: %s", b)
	}
	if got, err := Decode(b); err != nil || got != m {
		t.Fatalf("without createdAt: %+v %v", got, err)
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	for name, mut := range map[string]func(*Meta){
		"layout 0":        func(m *Meta) { m.Layout = 0 },
		"newer layout":    func(m *Meta) { m.Layout = Layout + 1 },
		"ranges 0":        func(m *Meta) { m.Ranges = 0 },
		"ranges too many": func(m *Meta) { m.Ranges = MaxRanges + 1 },
		"ttl fraction":    func(m *Meta) { m.LeaseTTL = 1500 * time.Millisecond },
		"ttl too short":   func(m *Meta) { m.LeaseTTL = 0 },
		"ttl too long":    func(m *Meta) { m.LeaseTTL = 2 * time.Hour },
		"skew negative":   func(m *Meta) { m.MaxSkew = -time.Millisecond },
		"skew too large":  func(m *Meta) { m.MaxSkew = 2 * time.Minute },
		"skew below ms":   func(m *Meta) { m.MaxSkew = time.Microsecond },
	} {
		m := valid()
		mut(&m)
		if _, err := Encode(m); err == nil {
			t.Errorf("%s: Encode accepted %+v", name, m)
		}
	}
}

// TestDecodeHostile: every malformed value is a clear error, never a zero or
// a default.
func TestDecodeHostile(t *testing.T) {
	for name, tc := range map[string]struct {
		in, want string
		newer    bool
	}{
		"empty":          {``, "empty value", false},
		"not json":       {`ranges=256`, "invalid", false},
		"array":          {`[1,2]`, "invalid", false},
		"null":           {`null`, "no layout", false},
		"no layout":      {`{"ranges":256,"leaseTTLMs":5000,"maxSkewMs":500}`, "no layout", false},
		"layout string":  {`{"layout":"1","ranges":256,"leaseTTLMs":5000,"maxSkewMs":500}`, "layout", false},
		"newer layout":   {`{"layout":2,"ranges":256,"shards":9}`, "upgrade", true},
		"unknown field":  {`{"layout":1,"ranges":256,"leaseTTLMs":5000,"maxSkewMs":500,"admin":true}`, "unknown field", false},
		"missing ttl":    {`{"layout":1,"ranges":256,"maxSkewMs":500}`, "missing leaseTTLMs", false},
		"missing skew":   {`{"layout":1,"ranges":256,"leaseTTLMs":5000}`, "missing maxSkewMs", false},
		"ranges 0":       {`{"layout":1,"ranges":0,"leaseTTLMs":5000,"maxSkewMs":500}`, "ranges 0", false},
		"ranges float":   {`{"layout":1,"ranges":2.5,"leaseTTLMs":5000,"maxSkewMs":500}`, "invalid", false},
		"ranges huge":    {`{"layout":1,"ranges":1e30,"leaseTTLMs":5000,"maxSkewMs":500}`, "invalid", false},
		"ttl negative":   {`{"layout":1,"ranges":8,"leaseTTLMs":-5000,"maxSkewMs":500}`, "out of bounds", false},
		"ttl overflow":   {`{"layout":1,"ranges":8,"leaseTTLMs":9223372036854775807,"maxSkewMs":500}`, "out of bounds", false},
		"ttl fraction":   {`{"layout":1,"ranges":8,"leaseTTLMs":1500,"maxSkewMs":500}`, "whole number", false},
		"trailing":       {`{"layout":1,"ranges":8,"leaseTTLMs":5000,"maxSkewMs":500} {}`, "after top-level value", false},
		"bad createdAt":  {`{"layout":1,"ranges":8,"leaseTTLMs":5000,"maxSkewMs":500,"createdAt":"yesterday"}`, "createdAt", false},
		"duplicate keys": {`{"layout":1,"ranges":8,"ranges":0,"leaseTTLMs":5000,"maxSkewMs":500}`, "ranges 0", false},
		"too big":        {`{"layout":1,"createdAt":"` + strings.Repeat("x", MaxSize) + `"}`, "more than", false},
	} {
		_, err := Decode([]byte(tc.in))
		if err == nil {
			t.Errorf("%s: Decode accepted %q", name, tc.in)
			continue
		}
		wantErr := ErrInvalid
		if tc.newer {
			wantErr = ErrNewerLayout
		}
		if !errors.Is(err, wantErr) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %v mentioning %q", name, err, wantErr, tc.want)
		}
	}
}

func TestCheckNamesEveryDifference(t *testing.T) {
	m := valid()
	if err := m.Check(Params{}); err != nil {
		t.Fatalf("nothing given: %v", err)
	}
	if err := m.Check(Params{Ranges: 256, LeaseTTL: 5 * time.Second, MaxSkew: 500 * time.Millisecond}); err != nil {
		t.Fatalf("same: %v", err)
	}
	err := m.Check(Params{Ranges: 64, LeaseTTL: 3 * time.Second})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "ranges: cluster 256, given 64") ||
		!strings.Contains(err.Error(), "lease TTL: cluster 5s, given 3s") || strings.Contains(err.Error(), "skew") {
		t.Fatalf("Check = %v", err)
	}
	o := m
	o.CreatedAt = time.Now()
	if d := m.Diff(o); d != nil {
		t.Fatalf("CreatedAt compared: %v", d)
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(valid())
	f.Add(b)
	f.Add([]byte(`{"layout":1}`))
	f.Add([]byte(`{"layout":2}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Decode(in)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNewerLayout) {
				t.Fatalf("unwrapped error %v", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Decode returned an invalid value %+v: %v", m, err)
		}
		out, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(out)
		if err != nil || again != m {
			t.Fatalf("round trip: %+v %v, want %+v", again, err, m)
		}
	})
}
