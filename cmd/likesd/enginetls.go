package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
)

// tlsFiles are one engine client's TLS flags: a CA to verify the servers and
// an optional client certificate.
type tlsFiles struct {
	name          string
	ca, cert, key string
}

func (t *tlsFiles) register(fs *flag.FlagSet, prefix, what string) {
	t.name = prefix
	fs.StringVar(&t.ca, prefix+"-tls-ca", "", "connect to "+what+" over TLS, verifying its certificate with this CA (PEM)")
	fs.StringVar(&t.cert, prefix+"-tls-cert", "", "client certificate for "+what+" (PEM; with --"+prefix+"-tls-key)")
	fs.StringVar(&t.key, prefix+"-tls-key", "", "the client certificate's key (PEM)")
}

func (t tlsFiles) set() bool { return t.ca != "" || t.cert != "" || t.key != "" }

// config is the client TLS configuration, or nil when no flag is set.
func (t tlsFiles) config() (*tls.Config, error) {
	if !t.set() {
		return nil, nil
	}
	if t.ca == "" {
		return nil, fmt.Errorf("--%s-tls-ca is required with --%s-tls-cert/--%s-tls-key", t.name, t.name, t.name)
	}
	if (t.cert == "") != (t.key == "") {
		return nil, fmt.Errorf("--%s-tls-cert and --%s-tls-key go together", t.name, t.name)
	}
	pem, err := os.ReadFile(t.ca)
	if err != nil {
		return nil, fmt.Errorf("--%s-tls-ca: %w", t.name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--%s-tls-ca %s holds no PEM certificate", t.name, t.ca)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if t.cert != "" {
		kp, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, fmt.Errorf("--%s-tls-cert/--%s-tls-key: %w", t.name, t.name, err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}

// engineTLS builds the three engines' TLS configurations; flags of an engine
// that is not chosen are refused.
func (e *engineFlags) engineTLS(cassandra, kafka, redis bool) (cass, kaf, red *tls.Config, err error) {
	var errs []error
	for _, x := range []struct {
		f      tlsFiles
		chosen bool
		out    **tls.Config
	}{{e.cassTLS, cassandra, &cass}, {e.kafkaTLS, kafka, &kaf}, {e.redisTLS, redis, &red}} {
		if x.f.set() && !x.chosen {
			errs = append(errs, fmt.Errorf("--%s-tls-* need the %s engine", x.f.name, x.f.name))
			continue
		}
		c, err := x.f.config()
		if err != nil {
			errs = append(errs, err)
		}
		*x.out = c
	}
	return cass, kaf, red, errors.Join(errs...)
}
