package envelope

import "testing"

func TestDecodeClaimAnswerReadsEveryTaskInOnePass(t *testing.T) {
	env := "{" + base + `,"headers":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`
	got, err := DecodeClaimAnswer([]byte(`{"tasks":[{"id":"a","lease_token":"t1","envelope":` + env +
		`,"extra":[1,{"x":null}]},{"lease_token":"t2","id":"b","envelope":` + env + `}],"more":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "a" || got[0].LeaseToken != "t1" || got[1].ID != "b" || got[1].LeaseToken != "t2" {
		t.Fatalf("got %+v", got)
	}
	want, err := Decode([]byte(env))
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		a, _ := got[i].Envelope.Encode()
		b, _ := want.Encode()
		if string(a) != string(b) {
			t.Fatalf("task %d envelope %s; want %s", i, a, b)
		}
	}
	if got[0].Envelope.Headers["traceparent"] == "" || got[0].Envelope.Queue != "q" {
		t.Fatalf("envelope fields lost: %+v", got[0].Envelope)
	}
}

func TestDecodeClaimAnswerEmptyAndNullTasks(t *testing.T) {
	for _, doc := range []string{`{"tasks":[]}`, `{"tasks":null}`, `{}`} {
		got, err := DecodeClaimAnswer([]byte(doc))
		if err != nil || len(got) != 0 {
			t.Fatalf("%s: %v, %v", doc, got, err)
		}
	}
}

func TestDecodeClaimAnswerRefusesBadAnswers(t *testing.T) {
	env := "{" + base + "}"
	for _, tc := range []struct{ doc, path string }{
		{`[]`, ""},
		{`{"tasks":{}}`, "tasks"},
		{`{"tasks":[1]}`, "tasks[0]"},
		{`{"tasks":[{"lease_token":"t","envelope":` + env + `}]}`, "tasks[0].id"},
		{`{"tasks":[{"id":"a","envelope":` + env + `}]}`, "tasks[0].lease_token"},
		{`{"tasks":[{"id":"a","lease_token":"t"}]}`, "tasks[0].envelope"},
		{`{"tasks":[{"id":"a","lease_token":"t","envelope":{}}]}`, "envelope_version"},
		{`{"tasks":[],"tasks":[]}`, ""},
		{`{"tasks":[]`, ""},
	} {
		_, err := DecodeClaimAnswer([]byte(tc.doc))
		var e *Error
		if err == nil || codeOf(err) != CodeMalformedEnvelope {
			t.Fatalf("%s: %v; want MALFORMED_ENVELOPE", tc.doc, err)
		}
		if e, _ = err.(*Error); e.Path != tc.path {
			t.Fatalf("%s: path %q; want %q (%v)", tc.doc, e.Path, tc.path, err)
		}
	}
}
