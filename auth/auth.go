package auth

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// EnvSecret is the environment variable holding the signing secret.
const EnvSecret = "LIKES_AUTH_SECRET"

// DevSecret is used when EnvSecret is unset. It is public: never use it in a
// real deployment (likesd prints a warning when it falls back to it).
const DevSecret = "likes-development-secret-do-not-use-in-production"

// ErrInvalidToken is returned for any token that does not verify.
var ErrInvalidToken = errors.New("auth: invalid token")

// SecretFromEnv returns the configured secret, and whether it is the dev default.
func SecretFromEnv() (secret []byte, isDefault bool) {
	if s := os.Getenv(EnvSecret); s != "" {
		return []byte(s), false
	}
	return []byte(DevSecret), true
}

// Claims is what a verified token says.
type Claims struct {
	User  string
	Admin bool
}

type claims struct {
	Admin bool `json:"admin,omitempty"`
	jwt.RegisteredClaims
}

// Sign returns a token for user valid for ttl from now.
func Sign(secret []byte, user string, admin bool, ttl time.Duration, now time.Time) (string, error) {
	if user == "" {
		return "", errors.New("auth: empty user")
	}
	if ttl <= 0 {
		return "", fmt.Errorf("auth: ttl must be positive, got %v", ttl)
	}
	c := claims{Admin: admin, RegisteredClaims: jwt.RegisteredClaims{
		Subject:   user,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// Verifier checks tokens against one secret. Verified tokens are remembered
// until they expire (a bounded cache keyed by the whole token string), because
// an HMAC check and JSON decode per request cost more than the rest of a read.
type Verifier struct {
	secret []byte
	parser *jwt.Parser
	now    func() time.Time

	mu    sync.Mutex
	cache map[string]cachedClaims
}

type cachedClaims struct {
	c   Claims
	exp time.Time
}

// verifiedCacheMax bounds the verified-token cache; it is cleared when full.
const verifiedCacheMax = 1 << 16

// leeway tolerates clock skew between the issuer and this verifier.
const leeway = 5 * time.Second

// NewVerifier returns a Verifier; now is the time source for expiry checks.
func NewVerifier(secret []byte, now func() time.Time) *Verifier {
	return &Verifier{secret: secret, now: now, cache: map[string]cachedClaims{}, parser: jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(now),
		jwt.WithLeeway(leeway),
	)}
}

// Verify returns the token's claims or an error wrapping ErrInvalidToken.
func (v *Verifier) Verify(token string) (Claims, error) {
	now := v.now()
	v.mu.Lock()
	if e, ok := v.cache[token]; ok {
		if now.Before(e.exp) {
			v.mu.Unlock()
			return e.c, nil
		}
		delete(v.cache, token)
	}
	v.mu.Unlock()
	var c claims
	_, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil })
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if c.Subject == "" {
		return Claims{}, fmt.Errorf("%w: no sub", ErrInvalidToken)
	}
	out := Claims{User: c.Subject, Admin: c.Admin}
	if c.ExpiresAt != nil {
		v.mu.Lock()
		if len(v.cache) >= verifiedCacheMax {
			clear(v.cache)
		}
		v.cache[token] = cachedClaims{c: out, exp: c.ExpiresAt.Add(leeway)}
		v.mu.Unlock()
	}
	return out, nil
}
