package main

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// jsonKeys collects every object key of a JSON document.
func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	var walk func(any)
	walk = func(x any) {
		switch x := x.(type) {
		case map[string]any:
			for k, v := range x {
				set[k] = true
				walk(v)
			}
		case []any:
			for _, v := range x {
				walk(v)
			}
		}
	}
	walk(doc)
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestJSONFieldsDocumented: every field of every -o json output (filled in,
// so omitempty fields show) is named in its command's help, so the
// documented names are the real ones; the envelopes' "truncated" is always
// present.
func TestJSONFieldsDocumented(t *testing.T) {
	skew := int64(500)
	cases := map[string]any{
		"pins list": pinsListJSON{Cluster: clusterJSON{Layout: 1, Ranges: 4, LeaseTTLMs: 5000, MaxSkewMs: &skew, CreatedAt: "x", Homes: []string{"a"}},
			Pins: []pinJSON{{NotBefore: "x", From: "a"}}, Owned: map[string]int{}, Missing: []uint32{1}},
		"cluster": clusterJSON{LeaseTTLMs: 1, MaxSkewMs: &skew, CreatedAt: "x", Homes: []string{"a"}},
		"regions": regionsJSON{Regions: []regionJSON{{HTTP: "h", GRPC: "g", KeepaliveAgo: "1s", AsOf: "x", Error: "e",
			Replication: []peerJSON{{LastError: "e"}}}}},
		"reconcile":  reconcileJSON{Mismatched: []mismatchJSON{{}}},
		"dlq list":   dlqListJSON{Records: []dlqRecordJSON{{DecodeError: "e"}}},
		"dlq replay": replayJSON{Replayed: []replayedJSON{{NewOffset: 1}}, Refused: []refusedJSON{{}}, NotFound: []int64{1}},
	}
	for path, v := range cases {
		out, _, err := likectl(t, append(strings.Fields(path), "-h")...)
		if err != nil {
			t.Fatal(err)
		}
		keys := jsonKeys(t, v)
		for _, k := range keys {
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(k) + `\b`).MatchString(out) {
				t.Errorf("%s: JSON field %q is not in its help", path, k)
			}
		}
		if path != "cluster" && !strings.Contains(strings.Join(keys, ","), "truncated") {
			t.Errorf("%s: no truncated field", path)
		}
	}
}
