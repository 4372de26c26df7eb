package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// fixturesDir is compliance/fixtures of the repository this module sits in.
// It is read when the test runs, so fixtures added later are covered.
func fixturesDir(t *testing.T) string {
	if dir := os.Getenv("RDQ_FIXTURES"); dir != "" {
		return dir
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "compliance", "fixtures")
}

type manifest struct {
	Format int `json:"format"`
	Cases  []struct {
		Name      string `json:"name"`
		File      string `json:"file"`
		Valid     bool   `json:"valid"`
		Code      string `json:"code"`
		Path      string `json:"path"`
		MaxBytes  *int   `json:"max_bytes"`
		Canonical bool   `json:"canonical"`
	} `json:"cases"`
}

func TestEveryComplianceFixture(t *testing.T) {
	dir := fixturesDir(t)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatalf("reading the manifest: %v", err)
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.Format != 1 {
		t.Fatalf("manifest format %d; this runner reads format 1", m.Format)
	}
	listed := map[string]bool{}
	for _, c := range m.Cases {
		listed[filepath.ToSlash(c.File)] = true
	}
	for _, sub := range []string{"valid", "invalid"} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !listed[sub+"/"+e.Name()] {
				t.Errorf("%s/%s is not in the manifest", sub, e.Name())
			}
		}
	}
	if len(m.Cases) < 200 {
		t.Errorf("only %d cases; the folder has more than 200", len(m.Cases))
	}
	for _, c := range m.Cases {
		c := c
		t.Run(c.Name, func(t *testing.T) {
			input, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(c.File)))
			if err != nil {
				t.Fatal(err)
			}
			limit := DefaultMaxBytes
			if c.MaxBytes != nil {
				limit = *c.MaxBytes
			}
			env, err := DecodeWithLimit(input, limit)
			if !c.Valid {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("decoded, or refused without an *Error (%v); want %s", err, c.Code)
				}
				if string(e.Code) != c.Code || (c.Path != "" && e.Path != c.Path) {
					t.Fatalf("refused with %s at %q; want %s at %q (%v)", e.Code, e.Path, c.Code, c.Path, e)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			first, err := env.Encode()
			if err != nil {
				t.Fatalf("encoding: %v", err)
			}
			if !jsonEqual(t, input, first) {
				t.Fatalf("re-encoding changed the document:\n in: %s\nout: %s", clip(input), clip(first))
			}
			again, err := Decode(first)
			if err != nil {
				t.Fatalf("the encoding does not decode: %v", err)
			}
			second, err := again.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, second) {
				t.Fatalf("the encoding is not a fixed point:\n%s\n%s", clip(first), clip(second))
			}
			if c.Canonical && !bytes.Equal(first, input) {
				t.Fatalf("a canonical file re-encoded differently:\n in: %s\nout: %s", clip(input), clip(first))
			}
		})
	}
}

func clip(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

// jsonEqual is the manifest's equality: JSON values, numbers by value, and a
// missing member equal to a null one.
func jsonEqual(t *testing.T, a, b []byte) bool {
	va, err := parseStrict(a)
	if err != nil {
		t.Fatal(err)
	}
	vb, err := parseStrict(b)
	if err != nil {
		t.Fatal(err)
	}
	return valueEqual(va, vb)
}

func valueEqual(a, b value) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case kindNull:
		return true
	case kindBool:
		return a.b == b.b
	case kindString:
		return a.s == b.s
	case kindNumber:
		ra, ok1 := new(big.Rat).SetString(a.s)
		rb, ok2 := new(big.Rat).SetString(b.s)
		return ok1 && ok2 && ra.Cmp(rb) == 0
	case kindArray:
		if len(a.obj) != len(b.obj) {
			return false
		}
		for i := range a.obj {
			if !valueEqual(a.obj[i].val, b.obj[i].val) {
				return false
			}
		}
		return true
	default:
		for _, m := range a.obj {
			va := m.val
			vb, ok := b.get(m.key)
			if !ok {
				vb = value{kind: kindNull}
			}
			if !valueEqual(va, vb) {
				return false
			}
		}
		for _, m := range b.obj {
			if _, ok := a.get(m.key); !ok && m.val.kind != kindNull {
				return false
			}
		}
		return true
	}
}
