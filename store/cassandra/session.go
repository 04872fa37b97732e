package cassandra

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/gocql/gocql"
)

// SessionConfig describes how to reach a Cassandra cluster.
type SessionConfig struct {
	// Hosts are contact points, "host" or "host:port" (port default 9042).
	Hosts []string
	// Timeout bounds one request (default 10s: lightweight transactions under
	// contention can take seconds before Cassandra answers).
	Timeout time.Duration
	// ConnectTimeout bounds connection set-up (default 10s).
	ConnectTimeout time.Duration
	// LocalDC, when set, routes requests to that datacenter first.
	LocalDC string
	// Username and Password, when set, authenticate with PasswordAuthenticator.
	Username, Password string
	// TLS, when set, encrypts every connection; the node's certificate is
	// verified against the host it was reached at.
	TLS *tls.Config
	// WriteCoalesce is how long a connection waits for more requests before
	// it writes what it has in one system call (default 200µs, the driver's;
	// negative: every request is written at once). Concurrent requests then
	// share a write here and a read on the server.
	WriteCoalesce time.Duration
}

// defaultWriteCoalesce is SessionConfig.WriteCoalesce's default.
const defaultWriteCoalesce = 200 * time.Microsecond

// ParseHosts splits a comma-separated host list, dropping empty entries.
func ParseHosts(s string) []string {
	var out []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// Connect opens a session that is not bound to a keyspace: this package names
// every table with its keyspace, so one session serves Migrate and any number
// of Stores. Requests default to LOCAL_QUORUM with SERIAL lightweight
// transactions. The caller closes the session.
func Connect(cfg SessionConfig) (*gocql.Session, error) {
	if len(cfg.Hosts) == 0 {
		return nil, fmt.Errorf("cassandra: no hosts given")
	}
	c := gocql.NewCluster(cfg.Hosts...)
	c.Consistency = gocql.LocalQuorum
	c.SerialConsistency = gocql.Serial
	c.Timeout = cfg.Timeout
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	c.ConnectTimeout = cfg.ConnectTimeout
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	switch {
	case cfg.WriteCoalesce == 0:
		c.WriteCoalesceWaitTime = defaultWriteCoalesce
	case cfg.WriteCoalesce < 0:
		c.WriteCoalesceWaitTime = 0
	default:
		c.WriteCoalesceWaitTime = cfg.WriteCoalesce
	}
	c.ProtoVersion = 4
	c.MaxWaitSchemaAgreement = 2 * time.Minute
	if cfg.LocalDC != "" {
		c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(cfg.LocalDC))
	} else {
		c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
	}
	if cfg.Username != "" {
		c.Authenticator = gocql.PasswordAuthenticator{Username: cfg.Username, Password: cfg.Password}
	}
	if cfg.TLS != nil {
		c.SslOpts = &gocql.SslOptions{Config: cfg.TLS.Clone(), EnableHostVerification: true}
	}
	s, err := c.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("cassandra: connect to %v: %w", cfg.Hosts, err)
	}
	return s, nil
}
