package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
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

// MinSecretLen is the shortest HS256 secret a real deployment accepts (256
// bits, the size of the HMAC-SHA256 key).
const MinSecretLen = 32

// MaxTokenLen bounds a token: longer ones are refused before any parsing.
const MaxTokenLen = 8 << 10

var (
	// ErrInvalidToken is returned for any token that does not verify.
	ErrInvalidToken = errors.New("auth: invalid token")
	// ErrConfig is returned for an unusable verifier or signer configuration
	// (no key, a key of an unsupported type, bad limits).
	ErrConfig = errors.New("auth: bad configuration")
)

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

// Token describes a token to sign.
type Token struct {
	User  string
	Admin bool
	// TTL is the validity from now (required, positive).
	TTL time.Duration
	// Issuer and Audience, when set, become the iss and aud claims.
	Issuer, Audience string
	// KeyID, when set, is the kid header (selects the key in a JWKS).
	KeyID string
}

// Sign returns an HS256 token for user valid for ttl from now.
func Sign(secret []byte, user string, admin bool, ttl time.Duration, now time.Time) (string, error) {
	return SignToken(secret, Token{User: user, Admin: admin, TTL: ttl}, now)
}

// SignToken signs t with key: a []byte secret (HS256), an ed25519.PrivateKey
// (EdDSA) or a P-256 *ecdsa.PrivateKey (ES256).
func SignToken(key any, t Token, now time.Time) (string, error) {
	if t.User == "" {
		return "", fmt.Errorf("%w: empty user", ErrConfig)
	}
	if t.TTL <= 0 {
		return "", fmt.Errorf("%w: ttl must be positive, got %v", ErrConfig, t.TTL)
	}
	var m jwt.SigningMethod
	switch k := key.(type) {
	case []byte:
		if len(k) == 0 {
			return "", fmt.Errorf("%w: empty secret", ErrConfig)
		}
		m = jwt.SigningMethodHS256
	case ed25519.PrivateKey:
		m = jwt.SigningMethodEdDSA
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return "", fmt.Errorf("%w: ECDSA keys must be P-256 (ES256)", ErrConfig)
		}
		m = jwt.SigningMethodES256
	default:
		return "", fmt.Errorf("%w: cannot sign with a %T", ErrConfig, key)
	}
	c := claims{Admin: t.Admin, RegisteredClaims: jwt.RegisteredClaims{
		Subject:   t.User,
		Issuer:    t.Issuer,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(t.TTL)),
	}}
	if t.Audience != "" {
		c.Audience = jwt.ClaimStrings{t.Audience}
	}
	tok := jwt.NewWithClaims(m, c)
	if t.KeyID != "" {
		tok.Header["kid"] = t.KeyID
	}
	return tok.SignedString(key)
}

// Config configures a Verifier. At least one of Secret and PublicKeys is
// required; each enables only its own algorithms (a secret HS256, Ed25519
// keys EdDSA, P-256 keys ES256), so a token can never be checked with a key
// of another kind (no algorithm confusion).
type Config struct {
	// Secret verifies HS256 tokens; empty disables HS256.
	Secret []byte
	// PublicKeys verify asymmetric tokens: ed25519.PublicKey or P-256
	// *ecdsa.PublicKey. A token with a kid header is checked against the keys
	// of that id only (KeyIDs); one without, against every key of its kind.
	PublicKeys []PublicKey
	// Issuer and Audience, when set, must be the token's iss and one of its aud.
	Issuer, Audience string
	// MaxLifetime, when positive, bounds exp − iat; iat is then required.
	MaxLifetime time.Duration
	// CacheBytes bounds the verified-token cache (default 8 MiB; negative
	// disables the cache).
	CacheBytes int
	// Now is the time source (default time.Now).
	Now func() time.Time
}

// PublicKey is one verification key and its optional key id.
type PublicKey struct {
	ID  string
	Key any
}

// Verifier checks tokens. Verified tokens are remembered until they expire (a
// cache keyed by the whole token string and bounded in bytes), because a
// signature check and JSON decode per request cost more than the rest of a read.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
	ed     []PublicKey
	ec     []PublicKey

	mu         sync.Mutex
	cache      map[string]cachedClaims
	cacheBytes int
}

type cachedClaims struct {
	c   Claims
	exp time.Time
}

// defaultCacheBytes bounds the verified-token cache; it is cleared when full.
const defaultCacheBytes = 8 << 20

// cacheEntryOverhead approximates a cache entry's memory beyond its token.
const cacheEntryOverhead = 128

// leeway tolerates clock skew between the issuer and this verifier.
const leeway = 5 * time.Second

// NewVerifier returns an HS256-only Verifier; now is the time source for
// expiry checks. It panics on an empty secret (a programming error).
func NewVerifier(secret []byte, now func() time.Time) *Verifier {
	v, err := New(Config{Secret: secret, Now: now})
	if err != nil {
		panic(err)
	}
	return v
}

// New validates cfg and returns a Verifier.
func New(cfg Config) (*Verifier, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = defaultCacheBytes
	}
	if cfg.MaxLifetime < 0 {
		return nil, fmt.Errorf("%w: negative MaxLifetime %v", ErrConfig, cfg.MaxLifetime)
	}
	v := &Verifier{cfg: cfg, cache: map[string]cachedClaims{}}
	var methods []string
	if len(cfg.Secret) > 0 {
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	for _, k := range cfg.PublicKeys {
		switch pk := k.Key.(type) {
		case ed25519.PublicKey:
			if len(pk) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("%w: Ed25519 public key of %d bytes", ErrConfig, len(pk))
			}
			v.ed = append(v.ed, k)
		case *ecdsa.PublicKey:
			if pk.Curve != elliptic.P256() {
				return nil, fmt.Errorf("%w: ECDSA public keys must be P-256 (ES256)", ErrConfig)
			}
			v.ec = append(v.ec, k)
		default:
			return nil, fmt.Errorf("%w: unsupported public key type %T (want Ed25519 or P-256 ECDSA)", ErrConfig, k.Key)
		}
	}
	if len(v.ed) > 0 {
		methods = append(methods, jwt.SigningMethodEdDSA.Alg())
	}
	if len(v.ec) > 0 {
		methods = append(methods, jwt.SigningMethodES256.Alg())
	}
	if len(methods) == 0 {
		return nil, fmt.Errorf("%w: need a secret or at least one public key", ErrConfig)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(cfg.Now),
		jwt.WithLeeway(leeway),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// keyFor returns the keys a token's algorithm may be checked with: only keys
// of that algorithm's kind, and of its kid when it names one.
func (v *Verifier) keyFor(t *jwt.Token) (any, error) {
	var pool []PublicKey
	switch t.Method.Alg() {
	case jwt.SigningMethodHS256.Alg():
		if len(v.cfg.Secret) == 0 {
			return nil, errors.New("HS256 not accepted")
		}
		return v.cfg.Secret, nil
	case jwt.SigningMethodEdDSA.Alg():
		pool = v.ed
	case jwt.SigningMethodES256.Alg():
		pool = v.ec
	default:
		return nil, fmt.Errorf("algorithm %s not accepted", t.Method.Alg())
	}
	kid, _ := t.Header["kid"].(string)
	var set jwt.VerificationKeySet
	for _, k := range pool {
		if kid == "" || k.ID == kid {
			set.Keys = append(set.Keys, k.Key)
		}
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("no %s key with kid %q", t.Method.Alg(), kid)
	}
	return set, nil
}

// Verify returns the token's claims or an error wrapping ErrInvalidToken.
func (v *Verifier) Verify(token string) (Claims, error) {
	if len(token) > MaxTokenLen {
		return Claims{}, fmt.Errorf("%w: token of %d bytes (at most %d)", ErrInvalidToken, len(token), MaxTokenLen)
	}
	now := v.cfg.Now()
	v.mu.Lock()
	if e, ok := v.cache[token]; ok {
		if now.Before(e.exp) {
			v.mu.Unlock()
			return e.c, nil
		}
		delete(v.cache, token)
		v.cacheBytes -= len(token) + cacheEntryOverhead
	}
	v.mu.Unlock()
	var c claims
	if _, err := v.parser.ParseWithClaims(token, &c, v.keyFor); err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if c.Subject == "" {
		return Claims{}, fmt.Errorf("%w: no sub", ErrInvalidToken)
	}
	if v.cfg.MaxLifetime > 0 {
		if c.IssuedAt == nil {
			return Claims{}, fmt.Errorf("%w: no iat (a maximum lifetime is enforced)", ErrInvalidToken)
		}
		if life := c.ExpiresAt.Sub(c.IssuedAt.Time); life > v.cfg.MaxLifetime {
			return Claims{}, fmt.Errorf("%w: lifetime %v exceeds the maximum %v", ErrInvalidToken, life, v.cfg.MaxLifetime)
		}
	}
	out := Claims{User: c.Subject, Admin: c.Admin}
	v.remember(token, out, c.ExpiresAt.Add(leeway))
	return out, nil
}

func (v *Verifier) remember(token string, c Claims, exp time.Time) {
	size := len(token) + cacheEntryOverhead
	if v.cfg.CacheBytes < 0 || size > v.cfg.CacheBytes {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.cache[token]; ok {
		return
	}
	if v.cacheBytes+size > v.cfg.CacheBytes {
		clear(v.cache)
		v.cacheBytes = 0
	}
	v.cache[token] = cachedClaims{c: c, exp: exp}
	v.cacheBytes += size
}

// CachedBytes is the verified-token cache's accounted size (for tests and metrics).
func (v *Verifier) CachedBytes() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cacheBytes
}
