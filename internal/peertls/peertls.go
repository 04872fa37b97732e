package peertls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Errors, matched with errors.Is.
var (
	ErrNoIdentity  = errors.New("peertls: certificate names no region (want a URI SAN likes://region/NAME)")
	ErrWrongRegion = errors.New("peertls: peer certificate names another region")
	ErrBadFiles    = errors.New("peertls: unusable certificate files")
)

const uriPrefix = "likes://region/"

// Identity is a region's certificate and key and the CA its peers' certificates
// must chain to.
type Identity struct {
	Region string
	cert   tls.Certificate
	leaf   *x509.Certificate
	pool   *x509.CertPool
}

// Load reads a region's certificate, key and CA (PEM files) and checks that
// they fit together: the certificate chains to the CA, names exactly one
// region and matches the key. The key file must not be readable by others.
func Load(certFile, keyFile, caFile string) (*Identity, error) {
	if fi, err := os.Stat(keyFile); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFiles, err)
	} else if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: key %s has mode %v; it must not be readable by group or others (chmod 600)", ErrBadFiles, keyFile, fi.Mode().Perm())
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFiles, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFiles, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFiles, err)
	}
	return New(certPEM, keyPEM, caPEM)
}

// New is Load from PEM bytes.
func New(certPEM, keyPEM, caPEM []byte) (*Identity, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate and key: %v", ErrBadFiles, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: the CA file holds no PEM certificate", ErrBadFiles)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFiles, err)
	}
	region, err := regionOf(leaf)
	if err != nil {
		return nil, err
	}
	if _, err := verify(leaf, cert.Certificate[1:], pool, x509.ExtKeyUsageServerAuth); err != nil {
		return nil, fmt.Errorf("%w: the certificate does not chain to the CA: %v", ErrBadFiles, err)
	}
	if _, err := verify(leaf, cert.Certificate[1:], pool, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, fmt.Errorf("%w: the certificate is not valid for client authentication: %v", ErrBadFiles, err)
	}
	cert.Leaf = leaf
	return &Identity{Region: region, cert: cert, leaf: leaf, pool: pool}, nil
}

// NotAfter is when the certificate expires.
func (id *Identity) NotAfter() time.Time { return id.leaf.NotAfter }

func regionOf(c *x509.Certificate) (string, error) {
	var names []string
	for _, u := range c.URIs {
		if s := u.String(); strings.HasPrefix(s, uriPrefix) {
			names = append(names, strings.TrimPrefix(s, uriPrefix))
		}
	}
	if len(names) != 1 || !validRegion(names[0]) {
		return "", fmt.Errorf("%w (found %q)", ErrNoIdentity, names)
	}
	return names[0], nil
}

// validRegion is the charset of region names: what a URI path segment carries
// unescaped, bounded.
func validRegion(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func verify(leaf *x509.Certificate, inter [][]byte, roots *x509.CertPool, usage x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	ip := x509.NewCertPool()
	for _, der := range inter {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		ip.AddCert(c)
	}
	return leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: ip, KeyUsages: []x509.ExtKeyUsage{usage}})
}

// ServerConfig is the TLS configuration of the region's gRPC listener: a
// client certificate of the CA is required.
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    id.pool,
	}
}

// ClientConfig is the TLS configuration for calling region want: the server's
// certificate must chain to the CA and name want. (Host names are not
// checked: a region's address comes from gossip or configuration, its name
// from its certificate.)
func (id *Identity) ClientConfig(want string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{id.cert},
		InsecureSkipVerify: true, // replaced by VerifyConnection: chain to our CA + region name
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("peertls: %s presented no certificate", want)
			}
			var inter [][]byte
			for _, c := range cs.PeerCertificates[1:] {
				inter = append(inter, c.Raw)
			}
			if _, err := verify(cs.PeerCertificates[0], inter, id.pool, x509.ExtKeyUsageServerAuth); err != nil {
				return fmt.Errorf("peertls: certificate of the server meant to be %s: %w", want, err)
			}
			got, err := regionOf(cs.PeerCertificates[0])
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%w: wanted %s, the server is %s", ErrWrongRegion, want, got)
			}
			return nil
		},
	}
}

// ServerCredentials are gRPC server credentials from ServerConfig.
func (id *Identity) ServerCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(id.ServerConfig())
}

// ClientCredentials are gRPC client credentials for calling region want.
func (id *Identity) ClientCredentials(want string) credentials.TransportCredentials {
	return credentials.NewTLS(id.ClientConfig(want))
}

// PeerRegion is the region the caller of a gRPC handler proved with its
// certificate. tls is false on a plaintext server (the operator's explicit
// --insecure-plaintext-peers): nothing is proven there.
func PeerRegion(ctx context.Context) (region string, tls bool, err error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return "", false, nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", false, nil
	}
	if len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return "", true, errors.New("peertls: the caller's certificate was not verified")
	}
	r, err := regionOf(ti.State.VerifiedChains[0][0])
	return r, true, err
}

// CheckCaller returns nil when the caller may speak for region claimed: on a
// TLS server its certificate must name claimed, and claimed must be one of
// regions (when regions is not empty). On a plaintext server every claim
// passes (nothing is authenticated there).
func CheckCaller(ctx context.Context, claimed string, regions []string) error {
	got, isTLS, err := PeerRegion(ctx)
	if err != nil || !isTLS {
		return err
	}
	if len(regions) > 0 && !slices.Contains(regions, got) {
		return fmt.Errorf("%w: the caller's certificate names %q, which is not a configured region", ErrWrongRegion, got)
	}
	if claimed != got {
		return fmt.Errorf("%w: the caller's certificate names %q but the message claims %q", ErrWrongRegion, got, claimed)
	}
	return nil
}

// NewCA makes a self-signed CA certificate and its key (PEM).
func NewCA(name string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemOf("CERTIFICATE", der), pemOf("PRIVATE KEY", kd), nil
}

// Issue makes a certificate for region, signed by the CA, valid for both
// server and client authentication; hosts (DNS names or IPs) are added as
// SANs for tools that check them.
func Issue(caCertPEM, caKeyPEM []byte, region string, hosts []string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if !validRegion(region) {
		return nil, nil, fmt.Errorf("peertls: region name %q: use letters, digits, '-', '_' or '.', at most 64", region)
	}
	ca, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: CA certificate and key: %v", ErrBadFiles, err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	if !caCert.IsCA {
		return nil, nil, fmt.Errorf("%w: %s is not a CA certificate", ErrBadFiles, caCert.Subject)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(uriPrefix + region)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "likes region " + region},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{u},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemOf("CERTIFICATE", der), pemOf("PRIVATE KEY", kd), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// Files are the conventional names under a folder: ca.crt, ca.key,
// NAME.crt, NAME.key.
func Files(dir, name string) (cert, key string) {
	return filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
}

// WriteNew writes data to path with mode perm, refusing to overwrite a file.
func WriteNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// EnsureDev makes (on first use) a development CA and one certificate per
// region under dir, and loads every region's Identity. Keys are 0600.
func EnsureDev(dir string, regions []string) (map[string]*Identity, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caCert, caKey := Files(dir, "ca")
	if _, err := os.Stat(caCert); errors.Is(err, os.ErrNotExist) {
		c, k, err := NewCA("likes dev CA", 10*365*24*time.Hour)
		if err != nil {
			return nil, err
		}
		if err := errors.Join(WriteNew(caKey, k, 0o600), WriteNew(caCert, c, 0o644)); err != nil {
			return nil, err
		}
	}
	cp, err := os.ReadFile(caCert)
	if err != nil {
		return nil, err
	}
	kp, err := os.ReadFile(caKey)
	if err != nil {
		return nil, err
	}
	out := map[string]*Identity{}
	for _, r := range regions {
		cf, kf := Files(dir, r)
		if _, err := os.Stat(cf); errors.Is(err, os.ErrNotExist) {
			c, k, err := Issue(cp, kp, r, []string{"127.0.0.1", "localhost"}, 10*365*24*time.Hour)
			if err != nil {
				return nil, err
			}
			if err := errors.Join(WriteNew(kf, k, 0o600), WriteNew(cf, c, 0o644)); err != nil {
				return nil, err
			}
		}
		id, err := Load(cf, kf, caCert)
		if err != nil {
			return nil, err
		}
		if id.Region != r {
			return nil, fmt.Errorf("%w: %s names region %q, not %q", ErrWrongRegion, cf, id.Region, r)
		}
		out[r] = id
	}
	return out, nil
}
