package model

import (
	"math/bits"
	"unicode/utf8"
)

// lo and hi are the byte-parallel constants of the word test in
// AppendJSONString: 0x01 and 0x80 in every byte of a uint64.
const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// AppendJSONString appends s quoted as encoding/json quotes a string with HTML
// escaping off: '"' and '\\' backslashed; the control characters below
// U+0020 as \b \f \n \r \t or \u00XX; U+2028 and U+2029 as \u2028 and
// \u2029; each byte of invalid UTF-8 as \ufffd; everything else as it is.
// Runs of plain ASCII are skipped eight bytes at a time.
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			// A byte ≥ 0x80, < 0x20, '"' or '\\' sets its high bit in
			// special; none does in a word of plain ASCII (the tests for a
			// byte below n and for a zero byte are exact about whether any
			// byte is, not which).
			special := x | (x-lo*0x20) & ^x
			q := x ^ (lo * '"')
			special |= (q - lo) & ^q
			bs := x ^ (lo * '\\')
			special |= (bs - lo) & ^bs
			if special&hi == 0 {
				i += 8
				continue
			}
			// The lowest flagged byte is a special one (a borrow only
			// flags bytes above the one it starts from): skip to it.
			i += bits.TrailingZeros64(special&hi) / 8
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"
