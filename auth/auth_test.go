package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
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

func mustVerifier(t *testing.T, cfg Config) *Verifier {
	t.Helper()
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOversizedTokenRefusedUnparsed(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	v := mustVerifier(t, Config{Secret: []byte("s"), Now: func() time.Time { return now }})
	big, err := Sign([]byte("s"), strings.Repeat("u", MaxTokenLen), false, time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(big); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("oversized token: %v", err)
	}
	if v.CachedBytes() != 0 {
		t.Fatalf("oversized token cached: %d bytes", v.CachedBytes())
	}
}

func TestCacheBoundedInBytes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const budget = 4 << 10
	v := mustVerifier(t, Config{Secret: []byte("s"), Now: func() time.Time { return now }, CacheBytes: budget})
	for i := range 200 {
		tok, err := Sign([]byte("s"), fmt.Sprintf("user-%d-%s", i, strings.Repeat("x", 500)), false, time.Minute, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(tok); err != nil {
			t.Fatal(err)
		}
		if b := v.CachedBytes(); b > budget {
			t.Fatalf("cache holds %d bytes, budget %d", b, budget)
		}
	}
}

func TestIssuerAudienceAndLifetime(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	secret := []byte(strings.Repeat("k", MinSecretLen))
	v := mustVerifier(t, Config{Secret: secret, Issuer: "likes-ops", Audience: "likes", MaxLifetime: time.Hour,
		Now: func() time.Time { return now }})
	sign := func(tk Token) string {
		t.Helper()
		s, err := SignToken(secret, tk, now)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := sign(Token{User: "alice", TTL: time.Hour, Issuer: "likes-ops", Audience: "likes"})
	if c, err := v.Verify(good); err != nil || c.User != "alice" {
		t.Fatalf("good token: %+v %v", c, err)
	}
	for name, tok := range map[string]string{
		"wrong iss":    sign(Token{User: "alice", TTL: time.Hour, Issuer: "evil", Audience: "likes"}),
		"no iss":       sign(Token{User: "alice", TTL: time.Hour, Audience: "likes"}),
		"wrong aud":    sign(Token{User: "alice", TTL: time.Hour, Issuer: "likes-ops", Audience: "other"}),
		"no aud":       sign(Token{User: "alice", TTL: time.Hour, Issuer: "likes-ops"}),
		"too long ttl": sign(Token{User: "alice", TTL: time.Hour + time.Minute, Issuer: "likes-ops", Audience: "likes"}),
	} {
		if _, err := v.Verify(tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: verified (%v)", name, err)
		}
	}
	// iat in the future (beyond the leeway) is refused.
	future, err := SignToken(secret, Token{User: "alice", TTL: time.Minute, Issuer: "likes-ops", Audience: "likes"}, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(future); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("future iat verified: %v", err)
	}
}

func TestEd25519AndES256(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	privPEM, pubPEM, err := MarshalPrivateKey(edPriv)
	if err != nil {
		t.Fatal(err)
	}
	_, ecPubPEM, err := MarshalPrivateKey(ecPriv)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ParsePublicKeys(append(pubPEM, ecPubPEM...))
	if err != nil || len(keys) != 2 {
		t.Fatalf("parse public keys: %d %v", len(keys), err)
	}
	parsedPriv, err := ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	v := mustVerifier(t, Config{PublicKeys: keys, Now: clock}) // no secret: HS256 off
	tk := Token{User: "op", Admin: true, TTL: time.Minute}
	for name, key := range map[string]any{"ed25519": parsedPriv, "es256": ecPriv} {
		tok, err := SignToken(key, tk, now)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := v.Verify(tok); err != nil || c.User != "op" || !c.Admin {
			t.Fatalf("%s token: %+v %v", name, c, err)
		}
	}
	refuse := func(name, tok string) {
		t.Helper()
		if _, err := v.Verify(tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s verified: %v", name, err)
		}
	}
	other, _ := SignToken(otherPriv, tk, now)
	refuse("token of another Ed25519 key", other)
	// Algorithm confusion: HS256 with the public key bytes (raw or PEM) as secret.
	raw, _ := SignToken([]byte(edPub), tk, now)
	refuse("HS256 keyed with the raw public key", raw)
	pemTok, _ := SignToken(pubPEM, tk, now)
	refuse("HS256 keyed with the PEM public key", pemTok)
	dev, _ := Sign([]byte(DevSecret), "op", true, time.Minute, now)
	refuse("HS256 with the development secret", dev)

	// A JWKS selects by kid.
	jwks := fmt.Sprintf(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":%q},{"kty":"EC","crv":"P-256","kid":"b","x":%q,"y":%q}]}`,
		base64.RawURLEncoding.EncodeToString(edPub),
		base64.RawURLEncoding.EncodeToString(ecBytes(t, ecPriv)[1:33]), base64.RawURLEncoding.EncodeToString(ecBytes(t, ecPriv)[33:]))
	jk, err := ParseJWKS([]byte(jwks))
	if err != nil || len(jk) != 2 {
		t.Fatalf("jwks: %d %v", len(jk), err)
	}
	vj := mustVerifier(t, Config{PublicKeys: jk, Now: clock})
	withKid, _ := SignToken(edPriv, Token{User: "op", TTL: time.Minute, KeyID: "a"}, now)
	if _, err := vj.Verify(withKid); err != nil {
		t.Fatalf("kid a: %v", err)
	}
	wrongKid, _ := SignToken(edPriv, Token{User: "op", TTL: time.Minute, KeyID: "b"}, now)
	if _, err := vj.Verify(wrongKid); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Ed25519 token with kid of the EC key verified: %v", err)
	}
	es, _ := SignToken(ecPriv, Token{User: "op", TTL: time.Minute, KeyID: "b"}, now)
	if _, err := vj.Verify(es); err != nil {
		t.Fatalf("kid b: %v", err)
	}
	if _, err := ParseJWKS([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AA","d":"AA"}]}`)); !errors.Is(err, ErrConfig) {
		t.Fatalf("JWKS with private key accepted: %v", err)
	}
}

func ecBytes(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	b, err := k.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewRefusesEmptyOrBadConfig(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no key: %v", err)
	}
	if _, err := New(Config{PublicKeys: []PublicKey{{Key: []byte("x")}}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad key type: %v", err)
	}
	if _, err := New(Config{Secret: []byte("s"), MaxLifetime: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative lifetime: %v", err)
	}
	if _, err := ParsePublicKeys([]byte("nothing")); !errors.Is(err, ErrConfig) {
		t.Fatalf("empty PEM: %v", err)
	}
}
