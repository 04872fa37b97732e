package etcdembed

import (
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ErrConfig prefixes configuration errors of the embedded server.
var ErrConfig = errors.New("etcdembed: bad configuration")

// TestingKnobs are switches for tests only, out of EmbeddedConfig's real
// fields.
type TestingKnobs struct {
	// NoFsync skips fsync (a crash can lose acknowledged writes).
	NoFsync bool
	// LowBcryptCost hashes auth passwords with bcrypt's minimum cost (a real
	// server keeps the default).
	LowBcryptCost bool
}

// EmbeddedConfig configures an in-process, single-member etcd server.
type EmbeddedConfig struct {
	// Name of the member (default "likes").
	Name string
	// Dir is the data directory (required; created if absent).
	Dir string
	// ClientAddr and PeerAddr are host:port to listen on, normally loopback,
	// e.g. "127.0.0.1:2379" and "127.0.0.1:2380" (both required).
	ClientAddr, PeerAddr string
	// StartTimeout bounds the wait for the server to be ready (default 30s).
	StartTimeout time.Duration
	// LogLevel of the server's zap logger (default "fatal": etcd logs its own
	// listener shutdown as errors; real failures still arrive on Err()).
	LogLevel string
	// Logger, when set, receives the server's logs instead of etcd's own zap
	// output (likesd bridges it into its slog handler, internal/logging.Zap);
	// LogLevel is then the bridge's business.
	Logger *zap.Logger
	// Knobs are test-only switches; nil in a deployment.
	Knobs *TestingKnobs
	// ClientTLS, when CertFile and KeyFile are set, serves clients over TLS
	// (https); with TrustedCAFile and ClientCertAuth it requires a client
	// certificate signed by that CA.
	ClientTLS EmbeddedTLS
}

// EmbeddedTLS is the client-side TLS of an embedded server (PEM files).
type EmbeddedTLS struct {
	CertFile, KeyFile, TrustedCAFile string
	ClientCertAuth                   bool
}

// Embedded is a running embedded etcd server.
type Embedded struct {
	etcd      *embed.Etcd
	endpoints []string
	closeOnce sync.Once
}

// StartEmbedded starts the server and waits until it serves clients.
func StartEmbedded(c EmbeddedConfig) (*Embedded, error) {
	if c.Dir == "" || c.ClientAddr == "" || c.PeerAddr == "" {
		return nil, errors.New("epoch: EmbeddedConfig needs Dir, ClientAddr and PeerAddr")
	}
	if c.Name == "" {
		c.Name = "likes"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.LogLevel == "" {
		c.LogLevel = "fatal"
	}
	scheme := "http"
	if c.ClientTLS.CertFile != "" || c.ClientTLS.KeyFile != "" {
		if c.ClientTLS.CertFile == "" || c.ClientTLS.KeyFile == "" {
			return nil, fmt.Errorf("%w: ClientTLS needs both CertFile and KeyFile", ErrConfig)
		}
		scheme = "https"
	}
	curl, err := url.Parse(scheme + "://" + c.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("epoch: ClientAddr: %w", err)
	}
	purl, err := url.Parse("http://" + c.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("epoch: PeerAddr: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	cfg.LogLevel = c.LogLevel
	if c.Logger != nil {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.Logger)
	}
	cfg.ListenClientUrls = []url.URL{*curl}
	cfg.AdvertiseClientUrls = []url.URL{*curl}
	cfg.ListenPeerUrls = []url.URL{*purl}
	cfg.AdvertisePeerUrls = []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if k := c.Knobs; k != nil {
		cfg.UnsafeNoFsync = k.NoFsync
	}
	if c.Knobs != nil && c.Knobs.LowBcryptCost {
		cfg.BcryptCost = 4 // bcrypt.MinCost
	}
	// The JSON gateway is a second, HTTP/1 door to the same API: likes uses
	// only gRPC, so it is closed.
	cfg.EnableGRPCGateway = false
	if scheme == "https" {
		cfg.ClientTLSInfo.CertFile = c.ClientTLS.CertFile
		cfg.ClientTLSInfo.KeyFile = c.ClientTLS.KeyFile
		cfg.ClientTLSInfo.TrustedCAFile = c.ClientTLS.TrustedCAFile
		cfg.ClientTLSInfo.ClientCertAuth = c.ClientTLS.ClientCertAuth
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("epoch: start embedded etcd: %w", err)
	}
	timer := time.NewTimer(c.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("epoch: embedded etcd failed while starting: %w", err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("epoch: embedded etcd not ready after %v", c.StartTimeout)
	}
	return &Embedded{etcd: e, endpoints: []string{curl.String()}}, nil
}

// Endpoints are the client URLs to give NewClient.
func (e *Embedded) Endpoints() []string { return append([]string(nil), e.endpoints...) }

// Err reports a fatal server error after start; it is closed by Close.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close stops the server. It is idempotent. Close clients first: open watch
// streams hold the server's graceful stop for its request timeout.
func (e *Embedded) Close() {
	e.closeOnce.Do(e.etcd.Close)
}
