package sessiontok_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/internal/sessiontok"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func TestRoundTripAndNewest(t *testing.T) {
	tok := sessiontok.Token{User: "alice"}
	tok = tok.With(sessiontok.Write{Item: "a", State: crdt.Liked, Version: crdt.Version{Epoch: 2, Op: 1}})
	tok = tok.With(sessiontok.Write{Item: "b", State: crdt.Liked, Version: crdt.Version{Epoch: 2, Op: 1}})
	tok = tok.With(sessiontok.Write{Item: "a", State: crdt.Unliked, Version: crdt.Version{Epoch: 2, Op: 2}})
	// An older write (a replayed answer of a stale key) never replaces a newer one.
	tok = tok.With(sessiontok.Write{Item: "b", State: crdt.Unliked, Version: crdt.Version{Epoch: 1, Op: 9}})
	got, err := sessiontok.Parse(key, sessiontok.Sign(key, tok))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := got.Lookup("a"); a.State != crdt.Unliked || a.Version.Op != 2 {
		t.Fatalf("a = %+v", a)
	}
	if b, _ := got.Lookup("b"); b.State != crdt.Liked || b.Version.Epoch != 2 {
		t.Fatalf("b = %+v, want the newer like kept", b)
	}
	if got.User != "alice" || len(got.Writes) != 2 {
		t.Fatalf("token = %+v", got)
	}
}

func TestBoundedOverManyWrites(t *testing.T) {
	tok := sessiontok.Token{User: "bob"}
	long := strings.Repeat("x", 200)
	for i := 0; i < 10000; i++ {
		tok = tok.With(sessiontok.Write{Item: fmt.Sprintf("%s-%d", long, i), State: crdt.Liked, Version: crdt.Version{Epoch: 1, Op: uint64(i)}})
		if i%997 == 0 {
			if n := len(sessiontok.Sign(key, tok)); n > sessiontok.MaxBytes {
				t.Fatalf("after %d writes the token is %d bytes, over %d", i+1, n, sessiontok.MaxBytes)
			}
		}
	}
	s := sessiontok.Sign(key, tok)
	if len(s) > sessiontok.MaxBytes {
		t.Fatalf("token is %d bytes", len(s))
	}
	got, err := sessiontok.Parse(key, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Lookup(fmt.Sprintf("%s-%d", long, 9999)); !ok {
		t.Fatal("the newest write was dropped")
	}
}

func TestForgedTokensAreRefused(t *testing.T) {
	tok := sessiontok.Token{User: "alice", Writes: []sessiontok.Write{{Item: "a", State: crdt.Liked, Version: crdt.Version{Epoch: 1, Op: 1}}}}
	good := sessiontok.Sign(key, tok)
	p, m, _ := strings.Cut(good, ".")
	for name, s := range map[string]string{
		"another key":       sessiontok.Sign([]byte("another key, 32 bytes long......"), tok),
		"payload swapped":   sessiontok.Sign(key, sessiontok.Token{User: "mallory"})[:strings.Index(sessiontok.Sign(key, sessiontok.Token{User: "mallory"}), ".")] + "." + m,
		"no signature":      p,
		"garbage":           "!!!.???",
		"oversized":         strings.Repeat("a", sessiontok.MaxBytes+1),
		"control character": sessiontok.Sign(key, sessiontok.Token{User: "a\x00b"}),
	} {
		if _, err := sessiontok.Parse(key, s); !errors.Is(err, sessiontok.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sessiontok.Sign(key, sessiontok.Token{User: "u", Writes: []sessiontok.Write{{Item: "i", State: crdt.Liked}}}))
	f.Add("e30.AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := sessiontok.Parse(key, s)
		if err != nil {
			return
		}
		if back, err := sessiontok.Parse(key, sessiontok.Sign(key, tok)); err != nil || back.User != tok.User || len(back.Writes) != len(tok.Writes) {
			t.Fatalf("re-signed token does not round-trip: %+v, %v", back, err)
		}
	})
}
