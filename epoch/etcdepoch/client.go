package etcdepoch

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EnvEtcdPassword is the environment variable holding ClientConfig.Password
// for the commands (a password is never a flag: flags show in ps).
const EnvEtcdPassword = "LIKES_ETCD_PASSWORD"

// ErrClientConfig is wrapped by every refused etcd client configuration.
var ErrClientConfig = errors.New("epoch: bad etcd client configuration")

// ClientConfig configures the etcd client: endpoints, TLS (https endpoints)
// and credentials.
type ClientConfig struct {
	Endpoints []string
	// CACert verifies the servers' certificates (PEM file; default: the system
	// roots). Cert and Key are this client's certificate, for servers that
	// require one (--client-cert-auth). Any of them makes the client use TLS,
	// and then every endpoint must be https.
	CACert, Cert, Key string
	// Username and Password authenticate to an etcd with auth enabled; the
	// password needs the user.
	Username, Password string
	// DialTimeout bounds the first connection (default 5s).
	DialTimeout time.Duration
	// Logger receives the client's zap logs (default: error level to
	// stderr); likesd bridges it into its slog handler (internal/logging.Zap).
	Logger *zap.Logger
}

// TLS reports whether the configuration asks for TLS.
func (c ClientConfig) TLS() bool { return c.CACert != "" || c.Cert != "" || c.Key != "" }

// validate checks the configuration and builds its tls.Config (nil: plain).
func (c ClientConfig) validate() (*tls.Config, error) {
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrClientConfig)
	}
	if (c.Cert == "") != (c.Key == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both its cert and key files", ErrClientConfig)
	}
	if c.Password != "" && c.Username == "" {
		return nil, fmt.Errorf("%w: a password needs a user", ErrClientConfig)
	}
	for _, ep := range c.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("%w: endpoint %q: want http://host:port or https://host:port", ErrClientConfig, ep)
		}
		if c.TLS() && u.Scheme != "https" {
			return nil, fmt.Errorf("%w: endpoint %q is plain http but TLS files are given (use https://)", ErrClientConfig, ep)
		}
	}
	if !c.TLS() {
		for _, ep := range c.Endpoints {
			if strings.HasPrefix(ep, "https://") {
				return &tls.Config{MinVersion: tls.VersionTLS12}, nil // system roots
			}
		}
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CACert != "" {
		pem, err := os.ReadFile(c.CACert)
		if err != nil {
			return nil, fmt.Errorf("%w: CA: %v", ErrClientConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrClientConfig, c.CACert)
		}
		tc.RootCAs = pool
	}
	if c.Cert != "" {
		kp, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %v", ErrClientConfig, err)
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return tc, nil
}

// NewClient dials endpoints over plain http with no credentials (the
// embedded development etcd on loopback) and a quiet logger.
func NewClient(endpoints []string) (*clientv3.Client, error) {
	return NewClientWith(ClientConfig{Endpoints: endpoints})
}

// NewClientWith validates c and dials etcd with a quiet (error-level) logger.
// With credentials, a wrong user or password fails here.
func NewClientWith(c ClientConfig) (*clientv3.Client, error) {
	tc, err := c.validate()
	if err != nil {
		return nil, err
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	lg := c.Logger
	if lg == nil {
		zc := zap.NewProductionConfig()
		zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
		if lg, err = zc.Build(); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.DialTimeout,
		Logger:      lg,
		TLS:         tc,
		Username:    c.Username,
		Password:    c.Password,
	})
	if err != nil {
		return nil, fmt.Errorf("epoch: etcd client: %w", err)
	}
	return cli, nil
}
