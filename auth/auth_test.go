package auth

import (
	"errors"
	"testing"
	"time"
)

func TestVerifyCachesUntilExpiry(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	secret := []byte("s")
	tok, err := Sign(secret, "alice", true, time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(secret, clock)
	for i := 0; i < 2; i++ { // second call is served from the cache
		c, err := v.Verify(tok)
		if err != nil || c.User != "alice" || !c.Admin {
			t.Fatalf("verify #%d = %+v, %v", i, c, err)
		}
	}
	now = now.Add(time.Minute + leeway + time.Second)
	if _, err := v.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("expired cached token verified: %v", err)
	}
	other, _ := Sign([]byte("other"), "alice", false, time.Minute, now)
	if _, err := v.Verify(other); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("token signed with another secret verified: %v", err)
	}
	if _, err := v.Verify(tok + "x"); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("tampered token verified: %v", err)
	}
}

func TestSignRefusesBadInput(t *testing.T) {
	if _, err := Sign([]byte("s"), "", false, time.Minute, time.Now()); err == nil {
		t.Fatal("empty user signed")
	}
	if _, err := Sign([]byte("s"), "u", false, 0, time.Now()); err == nil {
		t.Fatal("zero ttl signed")
	}
}
