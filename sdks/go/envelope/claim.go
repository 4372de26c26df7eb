package envelope

import "strconv"

// Claimed is one task of a claim answer: the task's id, the token of the
// lease just taken and its envelope.
type Claimed struct {
	ID         string
	LeaseToken string
	Envelope   Envelope
}

// DecodeClaimAnswer decodes the answer to a claim (POST
// /v1/queues/{q}/claim, docs/server.md: {"tasks": [{"id", "lease_token",
// "envelope"}]}) in one pass of the strict parser, each envelope decoded
// with Decode's rules (without the size limit): the worker's hot path, where
// scanning the answer with encoding/json and then parsing every envelope
// again cost about as much CPU as everything else. Unknown fields are
// ignored; a missing or null "tasks" is no task.
func DecodeClaimAnswer(data []byte) ([]Claimed, error) {
	v, err := parseStrict(data)
	if err != nil {
		return nil, &Error{Code: CodeMalformedEnvelope, Message: "the claim answer: " + err.Error()}
	}
	if v.kind != kindObject {
		return nil, malformed("", "the claim answer: expected an object, found %s", v.typeName())
	}
	tasks, ok := v.get("tasks")
	if !ok || tasks.kind == kindNull {
		return nil, nil
	}
	if tasks.kind != kindArray {
		return nil, malformed("tasks", "expected an array, found %s", tasks.typeName())
	}
	out := make([]Claimed, len(tasks.obj))
	for i, item := range tasks.obj {
		t := item.val
		prefix := "tasks[" + strconv.Itoa(i) + "]"
		f, err := newFields(t, prefix)
		if err != nil {
			return nil, err
		}
		if out[i].ID, err = f.str("id"); err != nil {
			return nil, err
		}
		if out[i].LeaseToken, err = f.str("lease_token"); err != nil {
			return nil, err
		}
		ev, err := f.required("envelope")
		if err != nil {
			return nil, err
		}
		if out[i].Envelope, err = decodeEnvelope(ev); err != nil {
			return nil, err
		}
	}
	return out, nil
}
