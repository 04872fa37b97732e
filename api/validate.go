package api

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxIDBytes bounds item ids, user ids and idempotency keys.
const MaxIDBytes = 256

// ValidateID checks an item id, user id or idempotency key: 1..256 bytes of valid
// UTF-8 without control characters (so 0x00 can separate ids in storage keys).
func ValidateID(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > MaxIDBytes:
		return fmt.Errorf("%s is %d bytes, the limit is %d", what, len(s), MaxIDBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s contains a control character (%U)", what, r)
		}
	}
	return nil
}
