package wire

import (
	"crypto/rand"
	"encoding/hex"
	"os"
)

// NewUUID4 returns a random (version 4) UUID's 16 bytes.
func NewUUID4() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return b
}

// NewRecordVersionNumber returns a UUID4 in its dashed form, as Python
// writes a record_version_number.
func NewRecordVersionNumber() string {
	b := NewUUID4()
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// DefaultOwnerName is Python's default owner_name: the host name
// immediately followed by a UUID4 in hex, with no separator.
func DefaultOwnerName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return host + hex.EncodeToString(NewUUID4())
}
