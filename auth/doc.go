// Package auth issues and verifies the bearer tokens of likes: JWTs whose
// `sub` is the user, with an optional `admin` claim. Tokens are HS256 (a
// shared secret of at least MinSecretLen bytes) or, so that whoever mints
// tokens needs no secret a region holds, EdDSA (Ed25519) or ES256 (P-256)
// checked with public keys from a PEM file or a JWKS. Each configured key
// kind enables only its own algorithm (no algorithm confusion); tokens over
// MaxTokenLen bytes are refused unparsed; iss, aud and a maximum lifetime are
// optional checks; the verified-token cache is bounded in bytes. The acting
// user always comes from a verified token, never from a body or a path.
package auth
