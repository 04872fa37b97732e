package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// errSecurity prefixes every refused security flag combination.
var errSecurity = errors.New("security")

// publicFlags are the public-side security flags (DESIGN section 10): the
// HTTP server's TLS and limits, token verification, and the etcd client's TLS
// and credentials.
type publicFlags struct {
	tlsCert, tlsKey   string
	readTimeout       time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	maxConns          int
	publicKey, jwks   string
	issuer, audience  string
	maxTokenTTL       time.Duration
	insecureDevSecret bool

	etcdCA, etcdCert, etcdKey, etcdUser string
}

// maxHeaderBytes bounds a request's header block (a token is at most 8 KiB).
const maxHeaderBytes = 16 << 10

func (p *publicFlags) register(fs *flag.FlagSet, run bool) {
	fs.StringVar(&p.tlsCert, "http-tls-cert", "", "PEM certificate (chain) of the public HTTPS listener; with --http-tls-key serves HTTPS only")
	fs.StringVar(&p.tlsKey, "http-tls-key", "", "PEM private key of --http-tls-cert")
	fs.DurationVar(&p.readTimeout, "http-read-timeout", 30*time.Second, "the longest a client may take to send a whole request (headers and body)")
	fs.DurationVar(&p.writeTimeout, "http-write-timeout", 60*time.Second, "the longest a request may take from its headers to the end of the answer")
	fs.DurationVar(&p.idleTimeout, "http-idle-timeout", 2*time.Minute, "how long an idle keep-alive connection stays open")
	fs.IntVar(&p.maxConns, "http-max-conns", 10000, "open HTTP connections accepted at once; more wait in the kernel backlog")
	fs.StringVar(&p.publicKey, "auth-public-key", "", "PEM file of Ed25519 or P-256 public keys verifying EdDSA/ES256 tokens (likectl token --private-key signs them)")
	fs.StringVar(&p.jwks, "auth-jwks", "", "JWKS file of Ed25519 (OKP) or P-256 (EC) public keys verifying EdDSA/ES256 tokens (selected by kid)")
	fs.StringVar(&p.issuer, "auth-issuer", "", "when set, tokens must carry this iss")
	fs.StringVar(&p.audience, "auth-audience", "", "when set, tokens must list this aud")
	fs.DurationVar(&p.maxTokenTTL, "auth-max-token-ttl", 24*time.Hour, "the longest token lifetime (exp - iat) accepted (0: no limit)")
	if !run {
		return // dev: its embedded etcd is plain, on loopback
	}
	{
		fs.BoolVar(&p.insecureDevSecret, "insecure-dev-secret", false, "TESTING ONLY: start without a signing secret of at least 32 bytes or a verification key (falls back to the PUBLIC development secret)")
	}
	fs.StringVar(&p.etcdCA, "etcd-cacert", "", "PEM CA verifying the etcd servers (https endpoints; default: system roots)")
	fs.StringVar(&p.etcdCert, "etcd-cert", "", "PEM client certificate presented to etcd")
	fs.StringVar(&p.etcdKey, "etcd-key", "", "PEM private key of --etcd-cert")
	fs.StringVar(&p.etcdUser, "etcd-user", "", "etcd user (password from $"+etcdepoch.EnvEtcdPassword+")")
}

// verification is what the region verifies tokens with.
type verification struct {
	secret []byte      // HS256; nil when only public keys verify
	auth   auth.Config // keys, iss, aud, lifetime
}

// authConfig validates the token flags and the secret (envSecret: the value
// of $LIKES_AUTH_SECRET, "" when unset). dev is `likesd dev` on loopback: it
// falls back to the public development secret with a warning. `likesd run`
// refuses to start without a secret of at least auth.MinSecretLen bytes or a
// verification key, unless --insecure-dev-secret.
func (p *publicFlags) authConfig(envSecret string, dev bool, logger *slog.Logger) (verification, error) {
	var v verification
	v.auth = auth.Config{Issuer: p.issuer, Audience: p.audience, MaxLifetime: p.maxTokenTTL}
	if p.maxTokenTTL < 0 {
		return v, fmt.Errorf("%w: --auth-max-token-ttl %v is negative", errSecurity, p.maxTokenTTL)
	}
	load := func(flagName, file string, parse func([]byte) ([]auth.PublicKey, error)) error {
		if file == "" {
			return nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("%w: --%s: %w", errSecurity, flagName, err)
		}
		keys, err := parse(b)
		if err != nil {
			return fmt.Errorf("%w: --%s %s: %w", errSecurity, flagName, file, err)
		}
		v.auth.PublicKeys = append(v.auth.PublicKeys, keys...)
		return nil
	}
	if err := load("auth-public-key", p.publicKey, auth.ParsePublicKeys); err != nil {
		return v, err
	}
	if err := load("auth-jwks", p.jwks, auth.ParseJWKS); err != nil {
		return v, err
	}
	haveKeys := len(v.auth.PublicKeys) > 0
	switch {
	case envSecret != "" && len(envSecret) >= auth.MinSecretLen:
		v.secret = []byte(envSecret)
	case envSecret != "" && (dev || p.insecureDevSecret):
		logger.Warn(fmt.Sprintf("%s is shorter than %d bytes: tokens signed with it can be forged by brute force. Use a random secret of at least %d bytes in any real deployment.",
			auth.EnvSecret, auth.MinSecretLen, auth.MinSecretLen))
		v.secret = []byte(envSecret)
	case envSecret != "":
		return v, fmt.Errorf("%w: $%s is %d bytes; a real deployment needs at least %d (e.g. `openssl rand -base64 48`), or --insecure-dev-secret for a test",
			errSecurity, auth.EnvSecret, len(envSecret), auth.MinSecretLen)
	case haveKeys:
		// Public keys only: HS256 is off, nobody holding a region's files can mint tokens.
	case dev || p.insecureDevSecret:
		logger.Warn(fmt.Sprintf("%s is not set: using the PUBLIC development secret; ANYONE CAN MINT TOKENS, admin ones included. Never expose this process beyond loopback.", auth.EnvSecret))
		v.secret = []byte(auth.DevSecret)
	default:
		return v, fmt.Errorf("%w: no token verification configured: set $%s to a secret of at least %d bytes, or give --auth-public-key / --auth-jwks (or --insecure-dev-secret for a test)",
			errSecurity, auth.EnvSecret, auth.MinSecretLen)
	}
	ac := v.auth
	ac.Secret = v.secret
	if _, err := auth.New(ac); err != nil { // the same validation the region applies
		return v, fmt.Errorf("%w: %w", errSecurity, err)
	}
	return v, nil
}

// etcdConfig is the etcd client configuration of the flags (password from the
// environment).
func (p *publicFlags) etcdConfig(endpoints string) etcdepoch.ClientConfig {
	var eps []string
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return etcdepoch.ClientConfig{
		Endpoints: eps, CACert: p.etcdCA, Cert: p.etcdCert, Key: p.etcdKey,
		Username: p.etcdUser, Password: os.Getenv(etcdepoch.EnvEtcdPassword),
	}
}

// httpSettings are the validated public HTTP server settings.
type httpSettings struct {
	tls                       *tls.Config // nil: plain HTTP
	read, write, idle, header time.Duration
	maxConns                  int
}

// httpConfig validates the HTTP flags and loads the TLS key pair.
func (p *publicFlags) httpConfig() (httpSettings, error) {
	hs := httpSettings{read: p.readTimeout, write: p.writeTimeout, idle: p.idleTimeout, header: 5 * time.Second, maxConns: p.maxConns}
	for name, d := range map[string]time.Duration{"http-read-timeout": p.readTimeout, "http-write-timeout": p.writeTimeout, "http-idle-timeout": p.idleTimeout} {
		if d <= 0 {
			return hs, fmt.Errorf("%w: --%s must be positive, got %v", errSecurity, name, d)
		}
	}
	hs.header = min(hs.header, hs.read)
	if p.maxConns < 1 {
		return hs, fmt.Errorf("%w: --http-max-conns must be at least 1, got %d", errSecurity, p.maxConns)
	}
	if (p.tlsCert == "") != (p.tlsKey == "") {
		return hs, fmt.Errorf("%w: --http-tls-cert and --http-tls-key go together", errSecurity)
	}
	if p.tlsCert != "" {
		kp, err := tls.LoadX509KeyPair(p.tlsCert, p.tlsKey)
		if err != nil {
			return hs, fmt.Errorf("%w: --http-tls-cert/--http-tls-key: %w", errSecurity, err)
		}
		hs.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp}}
	}
	return hs, nil
}

// scheme is the URL scheme the server is reached with.
func (hs httpSettings) scheme() string {
	if hs.tls != nil {
		return "https"
	}
	return "http"
}

// server builds the HTTP server of h and wraps ln with the connection cap and
// TLS.
func (hs httpSettings) server(h http.Handler, ln net.Listener) (*http.Server, net.Listener) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: hs.header,
		ReadTimeout:       hs.read,
		WriteTimeout:      hs.write,
		IdleTimeout:       hs.idle,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	ln = newLimitListener(ln, max(1, hs.maxConns))
	if hs.tls != nil {
		srv.TLSConfig = hs.tls.Clone()
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	return srv, ln
}

// limitListener accepts at most n connections open at once; Accept blocks
// (the kernel's backlog holds the rest) until one closes.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
