package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/likes-dev/likes/auth"
	"github.com/likes-dev/likes/epoch/etcdepoch"
)

// EnvPrivateKey names a default for --private-key.
const EnvPrivateKey = "LIKES_AUTH_PRIVATE_KEY"

// errFlags prefixes refused flag values (a usage error: exit 2).
var errFlags = fmt.Errorf("%w: likectl", errUsage)

// signer mints the tokens likectl sends or prints: with an Ed25519 or P-256
// private key (--private-key; the regions verify with the public key, and
// hold no secret able to mint tokens) or with $LIKES_AUTH_SECRET (HS256).
type signer struct {
	privateKey, issuer, audience, keyID string
	warn                                io.Writer
	warned                              bool // the development-secret warning, once per command
}

func (s *signer) register(fs *flag.FlagSet) {
	fs.StringVar(&s.privateKey, "private-key", os.Getenv(EnvPrivateKey), "PEM Ed25519 or P-256 private key to sign with (EdDSA/ES256; default $"+EnvPrivateKey+"); without it, HS256 with $LIKES_AUTH_SECRET")
	fs.StringVar(&s.issuer, "iss", "", "the token's iss claim (likesd --auth-issuer)")
	fs.StringVar(&s.audience, "aud", "", "the token's aud claim (likesd --auth-audience)")
	fs.StringVar(&s.keyID, "kid", "", "the token's kid header (selects the key in likesd's --auth-jwks)")
}

// sign returns a token for user valid for ttl from now.
func (s *signer) sign(user string, admin bool, ttl time.Duration) (string, error) {
	var key any
	if s.privateKey != "" {
		b, err := os.ReadFile(s.privateKey)
		if err != nil {
			return "", fmt.Errorf("%w: --private-key: %w", errFlags, err)
		}
		if key, err = auth.ParsePrivateKey(b); err != nil {
			return "", fmt.Errorf("%w: --private-key %s: %w", errFlags, s.privateKey, err)
		}
	} else {
		secret, isDefault := auth.SecretFromEnv()
		if isDefault && s.warn != nil && !s.warned {
			s.warned = true
			fmt.Fprintln(s.warn, "likectl: warning: LIKES_AUTH_SECRET is not set and no --private-key; signing with the public development secret")
		}
		key = secret
	}
	return auth.SignToken(key, auth.Token{User: user, Admin: admin, TTL: ttl, Issuer: s.issuer, Audience: s.audience, KeyID: s.keyID}, time.Now())
}

// etcdFlags are the etcd client's TLS files and user (password from
// $LIKES_ETCD_PASSWORD).
type etcdFlags struct {
	endpoints, cacert, cert, key, user string
	dialTimeout                        time.Duration
}

func (e *etcdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.endpoints, "etcd", defaultEtcd, "etcd endpoints, comma-separated (https://… with TLS)")
	fs.StringVar(&e.cacert, "etcd-cacert", "", "PEM CA verifying the etcd servers")
	fs.StringVar(&e.cert, "etcd-cert", "", "PEM client certificate presented to etcd")
	fs.StringVar(&e.key, "etcd-key", "", "PEM private key of --etcd-cert")
	fs.StringVar(&e.user, "etcd-user", "", "etcd user (password from $"+etcdepoch.EnvEtcdPassword+")")
	fs.DurationVar(&e.dialTimeout, "dial-timeout", 5*time.Second, "how long to wait for etcd before failing")
}

func (e *etcdFlags) config() etcdepoch.ClientConfig {
	var eps []string
	for _, ep := range strings.Split(e.endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return etcdepoch.ClientConfig{Endpoints: eps, CACert: e.cacert, Cert: e.cert, Key: e.key,
		Username: e.user, Password: os.Getenv(etcdepoch.EnvEtcdPassword), DialTimeout: e.dialTimeout}
}

// adminClient is how likectl calls a region's admin API: its token signer
// and an HTTP client trusting --http-cacert for https URLs.
type adminClient struct {
	signer
	cacert string
}

func (a *adminClient) register(fs *flag.FlagSet) {
	a.signer.register(fs)
	fs.StringVar(&a.cacert, "http-cacert", "", "PEM CA verifying the regions' HTTPS certificates (default: system roots)")
}

func (a *adminClient) client() (*http.Client, error) {
	if a.cacert == "" {
		return http.DefaultClient, nil
	}
	b, err := os.ReadFile(a.cacert)
	if err != nil {
		return nil, fmt.Errorf("%w: --http-cacert: %w", errFlags, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: --http-cacert %s holds no PEM certificate", errFlags, a.cacert)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// tokenKeyCommand writes a new Ed25519 key pair for signing tokens: the
// private key (mode 0600, for likectl --private-key) and the public key (for
// likesd --auth-public-key). Existing files are never overwritten.
func tokenKeyCommand() *command {
	return &command{
		name:    "token-key",
		summary: "write a new Ed25519 key pair: --out FILE (for --private-key) and FILE.pub (likesd --auth-public-key)",
		usage:   "token-key --out FILE",
		long:    "The private key is written with mode 0600; existing files are never overwritten.",
		setup: func(fs *flag.FlagSet, e *env) runFunc {
			out := fs.String("out", "", "private key file to create (required); the public key goes to OUT.pub")
			return func(ctx context.Context, args []string) error {
				if err := noArgs("token-key", args); err != nil {
					return err
				}
				if *out == "" {
					return fmt.Errorf("%w: token-key: --out is required", errFlags)
				}
				return tokenKey(*out, e.stdout)
			}
		},
	}
}

func tokenKey(out string, stdout io.Writer) error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	privPEM, pubPEM, err := auth.MarshalPrivateKey(priv)
	if err != nil {
		return err
	}
	write := func(path string, b []byte, mode os.FileMode) error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return fmt.Errorf("token-key: %w", err)
		}
		if _, err := f.Write(b); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}
	if err := write(out, privPEM, 0o600); err != nil {
		return err
	}
	if err := write(out+".pub", pubPEM, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (private: likectl --private-key) and %s.pub (public: likesd --auth-public-key)\n", out, out)
	return nil
}
