package main

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// termSafe makes s safe to print on a terminal: owners, versions, keys
// and values come from the table, where anyone who may write it can put
// escape sequences that clear the screen or set the window title, or
// bidirectional overrides that show text in another order. It escapes,
// the way Go writes them (\x1b, \n, \u009b, \u202e), the C0 controls
// (tab and newline included: a message stays on its line), DEL, the C1
// controls, the bidirectional controls and the bytes that are not UTF-8,
// and leaves every other character, non-ASCII letters included, as it
// is. It adds no quotes, and its result is its own: termSafe(termSafe(s))
// == termSafe(s). It is the one place ddblock's text output is made safe
// (cell and oneLine use it); --json output is JSON, escaped by
// encoding/json, and does not go through it.
func termSafe(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&0xf, 16))
		case unsafeRune(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+w])
		}
		i += w
	}
	return b.String()
}

// needsEscape says whether termSafe would change s.
func needsEscape(s string) bool {
	return !utf8.ValidString(s) || strings.ContainsFunc(s, unsafeRune)
}

// unsafeRune says whether r is a character termSafe escapes.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f,
		r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
