package envelope

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth mirrors serde_json's recursion limit: 127 nested arrays or
// objects parse, a 128th is refused, so both codecs accept the same inputs.
const maxDepth = 127

type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// value is one parsed JSON value. Numbers keep their source text.
type value struct {
	kind kind
	b    bool
	s    string // string contents (unescaped) or number text
	// obj holds an object's members in document order (keys unique), or an
	// array's elements with empty keys: one slice keeps value small, and
	// the parse allocates a value per member.
	obj []member
}

// member is one key and value of an object. Objects are slices, not maps:
// an envelope's objects are small, and building a map for each one was most
// of the cost of decoding a claim answer.
type member struct {
	key string
	val value
}

// get is the value of key in an object.
func (v value) get(key string) (value, bool) {
	for i := range v.obj {
		if v.obj[i].key == key {
			return v.obj[i].val, true
		}
	}
	return value{}, false
}

// sortedMembers is a copy of an object's members in key order.
func (v value) sortedMembers() []member {
	ms := append([]member(nil), v.obj...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].key < ms[j].key })
	return ms
}

// dupCheckMapAt is the member count from which parseObject detects duplicate
// keys with a map instead of comparing with every earlier key.
const dupCheckMapAt = 32

// knownStrings are the keys (and common values) of envelopes and of the
// answers that carry them, handed out without allocating a copy each time.
var knownStrings = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"tasks", "id", "lease_token", "envelope", "envelope_version", "queue", "handler_ref",
		"handler_version", "payload", "payload_content_type", "headers", "status", "priority",
		"deferral_count", "attempt_count", "redrive_count", "claim_count", "next_attempt_at",
		"lease_expires_at", "created_at", "attempts", "attempt_no", "started_at", "finished_at",
		"outcome", "error", "type", "message", "detail", "stack", "idempotency_key", "traceparent",
		"application/json", "IN_FLIGHT", "PENDING", "SUCCEEDED", "DEAD",
	} {
		m[k] = k
	}
	return m
}()

func (v value) typeName() string {
	switch v.kind {
	case kindNull:
		return "null"
	case kindBool:
		return "a boolean"
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindArray:
		return "an array"
	default:
		return "an object"
	}
}

// isIntegerText reports whether a number was written without fraction or exponent.
func isIntegerText(s string) bool {
	return !bytesContainAny(s, ".eE")
}

func bytesContainAny(s, chars string) bool {
	for i := 0; i < len(s); i++ {
		for j := 0; j < len(chars); j++ {
			if s[i] == chars[j] {
				return true
			}
		}
	}
	return false
}

type parser struct {
	data []byte
	// text is data as one string: an unescaped string or a number is a
	// substring of it, shared rather than copied (a parse of a claim answer
	// makes one copy of the answer instead of one per string).
	text  string
	pos   int
	depth int
	// members is a stack the objects being parsed collect their members on,
	// so each object allocates its slice once, at its exact size.
	members []member
}

type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }

// parseStrict parses one JSON document, refusing duplicate keys at any depth,
// invalid UTF-8, lone surrogates and trailing content.
func parseStrict(data []byte) (value, error) {
	p := &parser{data: data, text: string(data)}
	p.skipSpace()
	v, err := p.parseValue()
	if err != nil {
		return value{}, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return value{}, p.errorf("trailing characters")
	}
	return v, nil
}

func (p *parser) errorf(format string, args ...any) error {
	return &syntaxError{msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" at byte %d", p.pos)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) parseValue() (value, error) {
	if p.pos >= len(p.data) {
		return value{}, p.errorf("EOF while parsing a value")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.parseObject()
	case c == '[':
		return p.parseArray()
	case c == '"':
		s, err := p.parseString()
		return value{kind: kindString, s: s}, err
	case c == '-' || (c >= '0' && c <= '9'):
		return p.parseNumber()
	case c == 't':
		return value{kind: kindBool, b: true}, p.literal("true")
	case c == 'f':
		return value{kind: kindBool, b: false}, p.literal("false")
	case c == 'n':
		return value{kind: kindNull}, p.literal("null")
	default:
		return value{}, p.errorf("expected value")
	}
}

func (p *parser) literal(word string) error {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return p.errorf("expected %s", word)
	}
	p.pos += len(word)
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxDepth {
		return p.errorf("recursion limit exceeded")
	}
	return nil
}

func (p *parser) parseArray() (value, error) {
	if err := p.enter(); err != nil {
		return value{}, err
	}
	p.pos++ // '['
	v := value{kind: kindArray, obj: []member{}}
	start := len(p.members)
	defer func() { p.members = p.members[:start] }()
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return v, nil
	}
	for {
		p.skipSpace()
		item, err := p.parseValue()
		if err != nil {
			return value{}, err
		}
		p.members = append(p.members, member{val: item})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return value{}, p.errorf("EOF while parsing a list")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			p.depth--
			v.obj = append(make([]member, 0, len(p.members)-start), p.members[start:]...)
			return v, nil
		default:
			return value{}, p.errorf("expected , or ]")
		}
	}
}

func (p *parser) parseObject() (value, error) {
	if err := p.enter(); err != nil {
		return value{}, err
	}
	p.pos++ // '{'
	v := value{kind: kindObject}
	var seen map[string]struct{} // from dupCheckMapAt members on
	start := len(p.members)
	defer func() { p.members = p.members[:start] }()
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return v, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return value{}, p.errorf("key must be a string")
		}
		key, err := p.parseString()
		if err != nil {
			return value{}, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return value{}, p.errorf("expected :")
		}
		p.pos++
		p.skipSpace()
		item, err := p.parseValue()
		if err != nil {
			return value{}, err
		}
		dup := false
		if seen != nil {
			_, dup = seen[key]
		} else {
			for _, m := range p.members[start:] {
				if m.key == key {
					dup = true
					break
				}
			}
		}
		if dup {
			return value{}, p.errorf("duplicate key %q", key)
		}
		p.members = append(p.members, member{key, item})
		switch {
		case seen != nil:
			seen[key] = struct{}{}
		case len(p.members)-start == dupCheckMapAt:
			seen = make(map[string]struct{}, 2*dupCheckMapAt)
			for _, m := range p.members[start:] {
				seen[m.key] = struct{}{}
			}
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return value{}, p.errorf("EOF while parsing an object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			p.depth--
			v.obj = append(make([]member, 0, len(p.members)-start), p.members[start:]...)
			return v, nil
		default:
			return value{}, p.errorf("expected , or }")
		}
	}
}

func hexValue(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (p *parser) parseString() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			raw := p.data[start:p.pos]
			if !utf8.Valid(raw) {
				return "", p.errorf("invalid UTF-8 in a string")
			}
			p.pos++
			if k, ok := knownStrings[string(raw)]; ok { // looked up without allocating
				return k, nil
			}
			return p.text[start : p.pos-1], nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errorf("control character in a string")
		}
		p.pos++
	}
	buf := append([]byte(nil), p.data[start:p.pos]...)
	for {
		if p.pos >= len(p.data) {
			return "", p.errorf("EOF while parsing a string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			if !utf8.Valid(buf) {
				return "", p.errorf("invalid UTF-8 in a string")
			}
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf("control character in a string")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		p.pos++
		if p.pos >= len(p.data) {
			return "", p.errorf("EOF while parsing a string")
		}
		esc := p.data[p.pos]
		p.pos++
		switch esc {
		case '"', '\\', '/':
			buf = append(buf, esc)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return "", p.errorf("lone trailing surrogate in a \\u escape")
			case r >= 0xD800 && r <= 0xDBFF:
				if p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
					return "", p.errorf("lone leading surrogate in a \\u escape")
				}
				p.pos += 2
				lo, err := p.hex4()
				if err != nil {
					return "", err
				}
				if lo < 0xDC00 || lo > 0xDFFF {
					return "", p.errorf("lone leading surrogate in a \\u escape")
				}
				r = utf16.DecodeRune(r, lo)
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.errorf("invalid escape")
		}
	}
}

func (p *parser) hex4() (rune, error) {
	if p.pos+4 > len(p.data) {
		return 0, p.errorf("EOF while parsing a \\u escape")
	}
	r, ok := hexValue(p.data[p.pos : p.pos+4])
	if !ok {
		return 0, p.errorf("invalid \\u escape")
	}
	p.pos += 4
	return r, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *parser) parseNumber() (value, error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	if p.pos >= len(p.data) || !isDigit(p.data[p.pos]) {
		return value{}, p.errorf("invalid number")
	}
	if p.data[p.pos] == '0' {
		p.pos++
		if p.pos < len(p.data) && isDigit(p.data[p.pos]) {
			return value{}, p.errorf("invalid number")
		}
	} else {
		for p.pos < len(p.data) && isDigit(p.data[p.pos]) {
			p.pos++
		}
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if p.pos >= len(p.data) || !isDigit(p.data[p.pos]) {
			return value{}, p.errorf("invalid number")
		}
		for p.pos < len(p.data) && isDigit(p.data[p.pos]) {
			p.pos++
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if p.pos >= len(p.data) || !isDigit(p.data[p.pos]) {
			return value{}, p.errorf("invalid number")
		}
		for p.pos < len(p.data) && isDigit(p.data[p.pos]) {
			p.pos++
		}
	}
	return value{kind: kindNumber, s: p.canonicalNumber(start, p.pos)}, nil
}

// canonicalNumber keeps every digit as written (no number passes through a
// float64); the one normalisation, shared with the Rust codec, is the
// exponent's spelling: a lower-case e and an explicit sign (1E5 → 1e+5).
func (p *parser) canonicalNumber(start, end int) string {
	text := p.data[start:end]
	i := bytes.IndexAny(text, "eE")
	if i < 0 {
		return p.text[start:end]
	}
	out := make([]byte, 0, len(text)+1)
	out = append(out, text[:i]...)
	out = append(out, 'e')
	rest := text[i+1:]
	if rest[0] != '+' && rest[0] != '-' {
		out = append(out, '+')
	}
	return string(append(out, rest...))
}

// appendValue writes v in canonical form: compact, object keys sorted by
// UTF-8 bytes (which is code point order), numbers as parsed (canonicalNumber).
func appendValue(out []byte, v value) []byte {
	switch v.kind {
	case kindNull:
		return append(out, "null"...)
	case kindBool:
		if v.b {
			return append(out, "true"...)
		}
		return append(out, "false"...)
	case kindNumber:
		return append(out, v.s...)
	case kindString:
		return appendString(out, v.s)
	case kindArray:
		out = append(out, '[')
		for i, item := range v.obj {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendValue(out, item.val)
		}
		return append(out, ']')
	default:
		out = append(out, '{')
		for i, m := range v.sortedMembers() {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendString(out, m.key)
			out = append(out, ':')
			out = appendValue(out, m.val)
		}
		return append(out, '}')
	}
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string the way serde_json does: only '"',
// '\\' and control characters are escaped; everything else is raw UTF-8.
func appendString(out []byte, s string) []byte {
	if !utf8.ValidString(s) {
		// Only Go callers can build such a string; JSON must be UTF-8.
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out = append(out, s[start:i]...)
		switch c {
		case '"':
			out = append(out, '\\', '"')
		case '\\':
			out = append(out, '\\', '\\')
		case '\b':
			out = append(out, '\\', 'b')
		case '\t':
			out = append(out, '\\', 't')
		case '\n':
			out = append(out, '\\', 'n')
		case '\f':
			out = append(out, '\\', 'f')
		case '\r':
			out = append(out, '\\', 'r')
		default:
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}

// canonicalJSON parses raw and returns its canonical form.
func canonicalJSON(raw []byte) ([]byte, error) {
	v, err := parseStrict(raw)
	if err != nil {
		return nil, err
	}
	return appendValue(nil, v), nil
}
