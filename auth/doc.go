// Package auth issues and verifies the bearer tokens of likes: HS256 JWTs whose
// `sub` is the user, with an optional `admin` claim. The acting user always comes
// from a verified token, never from a body or a path.
package auth
