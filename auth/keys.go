package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
)

// ParsePublicKeys parses every "PUBLIC KEY" (PKIX) block of a PEM file:
// Ed25519 or P-256 ECDSA keys. A file with no such block is an error.
func ParsePublicKeys(data []byte) ([]PublicKey, error) {
	var out []PublicKey
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			continue
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: public key: %v", ErrConfig, err)
		}
		if err := checkPublic(k); err != nil {
			return nil, err
		}
		out = append(out, PublicKey{Key: k})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no PEM \"PUBLIC KEY\" block", ErrConfig)
	}
	return out, nil
}

func checkPublic(k any) error {
	switch pk := k.(type) {
	case ed25519.PublicKey:
		return nil
	case *ecdsa.PublicKey:
		if pk.Curve == elliptic.P256() {
			return nil
		}
	}
	return fmt.Errorf("%w: unsupported public key %T (want Ed25519 or P-256 ECDSA)", ErrConfig, k)
}

// ParsePrivateKey parses a PEM private key to sign tokens with: a "PRIVATE
// KEY" (PKCS #8) block holding an Ed25519 or P-256 key, or an "EC PRIVATE
// KEY" block.
func ParsePrivateKey(data []byte) (any, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, fmt.Errorf("%w: no PEM \"PRIVATE KEY\" block", ErrConfig)
		}
		switch b.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: private key: %v", ErrConfig, err)
			}
			switch pk := k.(type) {
			case ed25519.PrivateKey:
				return pk, nil
			case *ecdsa.PrivateKey:
				if pk.Curve == elliptic.P256() {
					return pk, nil
				}
			}
			return nil, fmt.Errorf("%w: unsupported private key %T (want Ed25519 or P-256 ECDSA)", ErrConfig, k)
		case "EC PRIVATE KEY":
			k, err := x509.ParseECPrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: private key: %v", ErrConfig, err)
			}
			if k.Curve != elliptic.P256() {
				return nil, fmt.Errorf("%w: ECDSA keys must be P-256 (ES256)", ErrConfig)
			}
			return k, nil
		}
	}
}

// MarshalPrivateKey encodes an Ed25519 or ECDSA private key as a PKCS #8 PEM
// block, and its public key as a PKIX PEM block.
func MarshalPrivateKey(key any) (private, public []byte, err error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var pub any
	switch k := key.(type) {
	case ed25519.PrivateKey:
		pub = k.Public()
	case *ecdsa.PrivateKey:
		pub = k.Public()
	default:
		return nil, nil, fmt.Errorf("%w: unsupported private key %T", ErrConfig, key)
	}
	pder, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), nil
}

type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	D   string `json:"d"`
}

// ParseJWKS parses a JSON Web Key Set (RFC 7517) of public keys: OKP/Ed25519
// and EC/P-256 keys; keys of other types and keys whose "use" is not "sig"
// are skipped. A key carrying private material ("d") is refused: the file is
// meant to be public. A set with no usable key is an error.
func ParseJWKS(data []byte) ([]PublicKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("%w: JWKS: %v", ErrConfig, err)
	}
	b64 := base64.RawURLEncoding
	var out []PublicKey
	for i, k := range set.Keys {
		if k.D != "" {
			return nil, fmt.Errorf("%w: JWKS key %d (kid %q) holds a private key", ErrConfig, i, k.Kid)
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch {
		case k.Kty == "OKP" && k.Crv == "Ed25519":
			x, err := b64.DecodeString(k.X)
			if err != nil || len(x) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("%w: JWKS key %d (kid %q): bad Ed25519 x", ErrConfig, i, k.Kid)
			}
			out = append(out, PublicKey{ID: k.Kid, Key: ed25519.PublicKey(x)})
		case k.Kty == "EC" && k.Crv == "P-256":
			x, err1 := b64.DecodeString(k.X)
			y, err2 := b64.DecodeString(k.Y)
			if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
				return nil, fmt.Errorf("%w: JWKS key %d (kid %q): bad P-256 coordinates", ErrConfig, i, k.Kid)
			}
			// Validate the point through the uncompressed encoding.
			enc := append(append([]byte{4}, x...), y...)
			pk, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), enc)
			if err != nil {
				return nil, fmt.Errorf("%w: JWKS key %d (kid %q): %v", ErrConfig, i, k.Kid, err)
			}
			out = append(out, PublicKey{ID: k.Kid, Key: pk})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: JWKS has no Ed25519 or P-256 signing key", ErrConfig)
	}
	return out, nil
}
