package api

import "github.com/likes-dev/likes/edge"

// MaxIDBytes bounds item ids, user ids and idempotency keys.
const MaxIDBytes = edge.MaxIDBytes

// ValidateID checks an item id, user id or idempotency key: 1..256 bytes of valid
// UTF-8 without control characters (so 0x00 can separate ids in storage keys).
func ValidateID(what, s string) error { return edge.ValidateID(what, s) }
