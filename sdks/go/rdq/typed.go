package rdq

import (
	"context"
	"encoding/json"
	"fmt"

	"rdq.dev/sdk/go/envelope"
)

// UndecodablePayloadErrorType: a typed handler's payload does not decode
// into its type (permanent: running it again cannot help), the name the
// Rust SDK records for the same failure.
const UndecodablePayloadErrorType = "rdq.UndecodablePayload"

// HandlerFunc is a handler of JSON payloads: the worker decodes the task's
// payload into a T with encoding/json and calls it with the value and the
// task. Register it with JSONHandler:
//
//	type Charge struct{ OrderID int64 `json:"order_id"` }
//
//	reg.Register("charge-payment", rdq.JSONHandler(func(ctx context.Context, c Charge, task envelope.Envelope) error {
//		return charge(ctx, c.OrderID)
//	}))
type HandlerFunc[T any] func(ctx context.Context, args T, task envelope.Envelope) error

// JSONHandler makes a Handler of h. A payload that does not decode into a T
// is a permanent failure of type rdq.UndecodablePayload, and h is not
// called. Decoding follows encoding/json: members T does not name are
// ignored, missing ones keep their zero value.
func JSONHandler[T any](h HandlerFunc[T]) Handler {
	if h == nil {
		panic("rdq: JSONHandler with a nil handler")
	}
	return func(ctx context.Context, task envelope.Envelope) error {
		var args T
		if err := json.Unmarshal(task.Payload, &args); err != nil {
			return PermanentAs(UndecodablePayloadErrorType,
				fmt.Errorf("the payload of handler %q does not decode into %T: %w", task.HandlerRef, args, err))
		}
		return h(ctx, args, task)
	}
}
