package envelope

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// Task ids are ULIDs: 26 upper-case Crockford base32 characters, first one
// 0–7 (128 bits). The server assigns them on submit; NewID exists for tests
// and tools that build envelopes themselves.

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IsValidID reports whether s is a canonical ULID.
func IsValidID(s string) bool {
	if len(s) != 26 || s[0] > '7' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isCrockford(s[i]) {
			return false
		}
	}
	return true
}

func isCrockford(c byte) bool {
	switch {
	case c >= '0' && c <= '9':
		return true
	case c >= 'A' && c <= 'Z':
		return c != 'I' && c != 'L' && c != 'O' && c != 'U'
	default:
		return false
	}
}

var idState struct {
	sync.Mutex
	hi uint64 // top 64 bits of the last id
	lo uint64 // bottom 64 bits
}

// NewID returns a fresh ULID, greater than every id this process made before
// (monotonic within a millisecond, as the Rust generator is).
func NewID() string {
	ms := uint64(time.Now().UnixMilli()) & (1<<48 - 1)
	idState.Lock()
	defer idState.Unlock()
	if idState.hi>>16 >= ms && (idState.hi|idState.lo) != 0 {
		idState.lo++
		if idState.lo == 0 {
			idState.hi++
		}
	} else {
		var r [10]byte
		_, _ = rand.Read(r[:])
		r[0] &= 0x7f // a burst of increments cannot carry into the time
		idState.hi = ms<<16 | uint64(binary.BigEndian.Uint16(r[0:2]))
		idState.lo = binary.BigEndian.Uint64(r[2:10])
	}
	var out [26]byte
	for i := 25; i >= 0; i-- {
		shift := uint(5 * (25 - i))
		var v uint64
		switch {
		case shift >= 64:
			v = idState.hi >> (shift - 64)
		case shift > 59:
			v = idState.lo>>shift | idState.hi<<(64-shift)
		default:
			v = idState.lo >> shift
		}
		out[i] = crockford[v&0x1f]
	}
	return string(out[:])
}
