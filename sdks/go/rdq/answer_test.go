package rdq

import (
	"reflect"
	"testing"
)

func TestDecodeSettleStatusesSkipsEnvelopes(t *testing.T) {
	doc := ` { "results" : [
		{"id":"a","status":200,"envelope":{"x":[1,2,{"y":"}]\"{"}],"z":null,"w":-1.5e3,"b":true}},
		{"envelope":{},"id":"b\u00e9","status":409,"code":"LEASE_LOST","detail":"the lease \"t\" is gone","extra":[[],{}]},
		{"id":"c","status":200}
	], "other": {"k":"v"} } `
	got, err := decodeSettleStatuses([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []settleStatus{
		{ID: "a", Status: 200},
		{ID: "bé", Status: 409, Code: "LEASE_LOST", Detail: `the lease "t" is gone`},
		{ID: "c", Status: 200},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v; want %+v", got, want)
	}
	if got, err := decodeSettleStatuses([]byte(`{"results":[]}`)); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
}

func TestDecodeSettleStatusesRefusesMalformedAnswers(t *testing.T) {
	for _, doc := range []string{
		``, `[]`, `{`, `{"results":[`, `{"results":[{"id":"a"`, `{"results":[{"id":"a","status":x}]}`,
		`{"results":[{"id":"a","envelope":{"x":[1}]}]}`, `{"results":[{"id":"a","envelope":"open}]}`,
		`{"results":[{"id":"a"}]} trailing`, `{"results":[{"id":"a"},]}`, `{"results":[{"id":"a\"}]}`,
		`{"results":[{"envelope":}]}`, `{"results":[{"id":1}]}`,
	} {
		if got, err := decodeSettleStatuses([]byte(doc)); err == nil {
			t.Fatalf("%q: accepted as %+v", doc, got)
		}
	}
}
