package rdq

import (
	"encoding/json"
	"errors"
	"strconv"
)

// A settle answer ({"results": [{"id", "status", "code", "detail",
// "envelope"}]}, docs/server.md) carries every settled envelope back; a
// worker without a dead-letter hook needs only each item's status. This
// reader takes the statuses and steps over everything else (the envelopes
// above all) in one pass, without building or allocating anything for what
// it skips: encoding/json would scan the whole answer twice (once to check
// it, once to decode) even into a struct without an envelope field.

// errAnswer is a settle answer that is not the JSON it should be.
var errAnswer = errors.New("rdq: malformed settle answer")

type answerReader struct {
	data []byte
	pos  int
}

func (r *answerReader) space() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// peek is the next non-space byte, or 0 at the end.
func (r *answerReader) peek() byte {
	r.space()
	if r.pos >= len(r.data) {
		return 0
	}
	return r.data[r.pos]
}

func (r *answerReader) expect(c byte) error {
	if r.peek() != c {
		return errAnswer
	}
	r.pos++
	return nil
}

// rawString steps over a string and returns it with its quotes, and whether
// it holds an escape.
func (r *answerReader) rawString() ([]byte, bool, error) {
	if r.peek() != '"' {
		return nil, false, errAnswer
	}
	start := r.pos
	escaped := false
	for r.pos++; r.pos < len(r.data); r.pos++ {
		switch r.data[r.pos] {
		case '\\':
			escaped = true
			r.pos++
		case '"':
			r.pos++
			return r.data[start:r.pos], escaped, nil
		}
	}
	return nil, false, errAnswer
}

func (r *answerReader) str() (string, error) {
	raw, escaped, err := r.rawString()
	if err != nil {
		return "", err
	}
	if !escaped {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errAnswer
	}
	return s, nil
}

func (r *answerReader) integer() (int, error) {
	r.space()
	start := r.pos
	for r.pos < len(r.data) && (r.data[r.pos] == '-' || r.data[r.pos] >= '0' && r.data[r.pos] <= '9') {
		r.pos++
	}
	n, err := strconv.Atoi(string(r.data[start:r.pos]))
	if err != nil {
		return 0, errAnswer
	}
	return n, nil
}

// skip steps over one value of any kind, nested arrays and objects included
// (their brackets must match; what lies between them is not checked further).
func (r *answerReader) skip() error {
	var buf [32]byte
	open := buf[:0] // the closing bracket each open array or object expects
	for {
		switch c := r.peek(); c {
		case 0:
			return errAnswer
		case '"':
			if _, _, err := r.rawString(); err != nil {
				return err
			}
		case '{', '[':
			open = append(open, c+2) // '}' is '{'+2, ']' is '['+2
			r.pos++
			continue
		case '}', ']':
			if len(open) == 0 || open[len(open)-1] != c {
				return errAnswer
			}
			open = open[:len(open)-1]
			r.pos++
		case ',', ':':
			if len(open) == 0 {
				return errAnswer
			}
			r.pos++
			continue
		default: // number, true, false, null
			start := r.pos
			for r.pos < len(r.data) && !isDelimiter(r.data[r.pos]) {
				r.pos++
			}
			if r.pos == start {
				return errAnswer
			}
		}
		if len(open) == 0 {
			return nil
		}
	}
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', ':', '[', ']', '{', '}', '"', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// object calls field for each key of an object; field reads or skips the value.
func (r *answerReader) object(field func(key []byte) error) error {
	if err := r.expect('{'); err != nil {
		return err
	}
	if r.peek() == '}' {
		r.pos++
		return nil
	}
	for {
		key, escaped, err := r.rawString()
		if err != nil || escaped {
			return errAnswer
		}
		if err := r.expect(':'); err != nil {
			return err
		}
		if err := field(key[1 : len(key)-1]); err != nil {
			return err
		}
		switch r.peek() {
		case ',':
			r.pos++
		case '}':
			r.pos++
			return nil
		default:
			return errAnswer
		}
	}
}

// decodeSettleStatuses reads a settle answer's per-item statuses.
func decodeSettleStatuses(data []byte) ([]settleStatus, error) {
	r := &answerReader{data: data}
	var out []settleStatus
	err := r.object(func(key []byte) error {
		if string(key) != "results" {
			return r.skip()
		}
		if err := r.expect('['); err != nil {
			return err
		}
		if r.peek() == ']' {
			r.pos++
			return nil
		}
		for {
			var s settleStatus
			err := r.object(func(key []byte) error {
				var err error
				switch string(key) {
				case "id":
					s.ID, err = r.str()
				case "status":
					s.Status, err = r.integer()
				case "code":
					s.Code, err = r.str()
				case "detail":
					s.Detail, err = r.str()
				default:
					err = r.skip()
				}
				return err
			})
			if err != nil {
				return err
			}
			out = append(out, s)
			switch r.peek() {
			case ',':
				r.pos++
			case ']':
				r.pos++
				return nil
			default:
				return errAnswer
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if r.peek() != 0 {
		return nil, errAnswer
	}
	return out, nil
}

// settleStatuses is the answer of a settle whose envelopes are not needed.
type settleStatuses struct{ results []settleStatus }

// decodeAnswer reads the statuses in one pass (see answerDecoder).
func (a *settleStatuses) decodeAnswer(data []byte) (err error) {
	a.results, err = decodeSettleStatuses(data)
	return err
}
