// Package sessiontok is the Likes-Session token: a signed, bounded record of
// what one actor has written (per item, the edge's state and version after the
// write), handed out with every write answer and sent back on reads, so that
// any region can answer the actor's button at least as new as their own
// writes (DESIGN P3 across regions, issue 16).
//
// The token is opaque to clients: base64url(payload) "." base64url(HMAC-SHA256).
// Every region of a cluster holds the same key, so a token minted by one
// region verifies at all. A token that fails to verify, names another user
// or is malformed is ignored, never trusted. Its size is bounded (MaxBytes):
// the oldest writes are dropped first, which only weakens the guarantee for
// items the actor has not touched for a while. Pure; safe for concurrent use.
package sessiontok

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/likes-dev/likes/crdt"
	"github.com/likes-dev/likes/edge"
)

// MaxBytes bounds an encoded token (a header), however many writes it has seen.
const MaxBytes = 4096

// Header is the HTTP header that carries the token both ways.
const Header = "Likes-Session"

// ErrInvalid is returned for a token that does not verify or decode.
var ErrInvalid = errors.New("sessiontok: invalid token")

// Write is one write the actor made: the edge's register after it.
type Write struct {
	Item    string
	State   crdt.State
	Version crdt.Version
}

// Register is the write's edge register.
func (w Write) Register() crdt.Register { return crdt.Register{State: w.State, Version: w.Version} }

// Token is what one actor has written, newest last, one entry per item.
type Token struct {
	User   string
	Writes []Write
}

// Lookup is the newest write the token names for item.
func (t Token) Lookup(item string) (Write, bool) {
	for _, w := range t.Writes {
		if w.Item == item {
			return w, true
		}
	}
	return Write{}, false
}

// With returns the token after w: the item's entry is replaced when w is
// newer (and moved last), and the oldest entries are dropped while the
// encoded token would exceed MaxBytes.
func (t Token) With(w Write) Token {
	out := Token{User: t.User, Writes: make([]Write, 0, len(t.Writes)+1)}
	for _, x := range t.Writes {
		if x.Item == w.Item {
			if w.Register().Less(x.Register()) {
				w = x // keep the newer one
			}
			continue
		}
		out.Writes = append(out.Writes, x)
	}
	out.Writes = append(out.Writes, w)
	for len(out.Writes) > 1 && len(payload(out)) > maxPayload {
		out.Writes = out.Writes[1:]
	}
	return out
}

// maxPayload keeps the signed, base64-encoded token within MaxBytes.
const maxPayload = (MaxBytes-44)*3/4 - 4

type wire struct {
	U string  `json:"u"`
	W [][]any `json:"w"`
}

func payload(t Token) []byte {
	wr := wire{U: t.User, W: make([][]any, len(t.Writes))}
	for i, w := range t.Writes {
		wr.W[i] = []any{w.Item, w.State, w.Version.Epoch, w.Version.Op}
	}
	b, _ := json.Marshal(wr)
	return b
}

func mac(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("likes-session-v1\x00"))
	m.Write(msg)
	return m.Sum(nil)
}

// Sign encodes and signs t with key.
func Sign(key []byte, t Token) string {
	p := payload(t)
	return base64.RawURLEncoding.EncodeToString(p) + "." + base64.RawURLEncoding.EncodeToString(mac(key, p))
}

// Parse verifies s with key and decodes it; every field is validated as the
// API validates ids and states.
func Parse(key []byte, s string) (Token, error) {
	if len(s) > MaxBytes {
		return Token{}, fmt.Errorf("%w: %d bytes", ErrInvalid, len(s))
	}
	ps, ms, ok := strings.Cut(s, ".")
	if !ok {
		return Token{}, fmt.Errorf("%w: no signature", ErrInvalid)
	}
	p, err1 := base64.RawURLEncoding.DecodeString(ps)
	m, err2 := base64.RawURLEncoding.DecodeString(ms)
	if err1 != nil || err2 != nil || !hmac.Equal(m, mac(key, p)) {
		return Token{}, fmt.Errorf("%w: bad signature", ErrInvalid)
	}
	var wr struct {
		U string              `json:"u"`
		W [][]json.RawMessage `json:"w"`
	}
	if err := json.Unmarshal(p, &wr); err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := edge.ValidateID("user", wr.U); err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	t := Token{User: wr.U}
	for _, f := range wr.W {
		var w Write
		if len(f) != 4 || json.Unmarshal(f[0], &w.Item) != nil || json.Unmarshal(f[1], &w.State) != nil ||
			json.Unmarshal(f[2], &w.Version.Epoch) != nil || json.Unmarshal(f[3], &w.Version.Op) != nil {
			return Token{}, fmt.Errorf("%w: malformed write", ErrInvalid)
		}
		if err := edge.ValidateID("item", w.Item); err != nil || w.State > crdt.Erased {
			return Token{}, fmt.Errorf("%w: bad write", ErrInvalid)
		}
		t.Writes = append(t.Writes, w)
	}
	return t, nil
}
