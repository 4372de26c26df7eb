package rdq

import (
	"context"
	"fmt"
	"sync"
	"time"

	"rdq.dev/sdk/go/envelope"
)

// Handler runs one task. nil is SUCCESS; an error is a failure classified by
// the outcome ladder. The payload bytes are task.Payload.
type Handler func(ctx context.Context, task envelope.Envelope) error

// ResultHandler is a handler that reports through a return value as well as
// an error; its OutcomeMapper turns both into the outcome.
type ResultHandler func(ctx context.Context, task envelope.Envelope) (any, error)

type registered struct {
	run     ResultHandler
	mapper  OutcomeMapper
	timeout time.Duration
}

// HandlerOption configures one registration.
type HandlerOption func(*registered)

// WithOutcomeMapper makes m authoritative for the handler's outcomes (it
// sees ret == nil for a plain Handler).
func WithOutcomeMapper(m OutcomeMapper) HandlerOption {
	return func(r *registered) { r.mapper = m }
}

// Registry maps handler refs to handlers. Register everything before the
// worker runs: a Worker reads the registry once, when Run starts.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]registered
}

// NewRegistry makes an empty Registry.
func NewRegistry() *Registry { return &Registry{handlers: map[string]registered{}} }

// Register adds the handler for ref. Like http.HandleFunc it panics on a
// programming error: a ref outside [a-z0-9._-]{1,240} or registered twice.
func (r *Registry) Register(ref string, h Handler, opts ...HandlerOption) {
	if h == nil {
		panic("rdq: Register with a nil handler")
	}
	r.add(ref, registered{run: func(ctx context.Context, t envelope.Envelope) (any, error) {
		return nil, h(ctx, t)
	}}, opts)
}

// RegisterResult adds a handler that returns a value; mapper decides the
// outcome from the value and the error (and is required: with no mapper a
// returned value would mean nothing).
func (r *Registry) RegisterResult(ref string, h ResultHandler, mapper OutcomeMapper, opts ...HandlerOption) {
	if h == nil || mapper == nil {
		panic("rdq: RegisterResult needs a handler and an OutcomeMapper")
	}
	r.add(ref, registered{run: h, mapper: mapper}, opts)
}

func (r *Registry) add(ref string, reg registered, opts []HandlerOption) {
	if err := envelope.ValidateHandlerRef(ref); err != nil {
		panic(fmt.Sprintf("rdq: Register(%q): %v", ref, err))
	}
	for _, o := range opts {
		o(&reg)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handlers == nil {
		r.handlers = map[string]registered{}
	}
	if _, dup := r.handlers[ref]; dup {
		panic(fmt.Sprintf("rdq: handler %q registered twice", ref))
	}
	r.handlers[ref] = reg
}

// snapshot is a copy of the handlers, read without a lock.
func (r *Registry) snapshot() map[string]registered {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string]registered, len(r.handlers))
	for ref, h := range r.handlers {
		out[ref] = h
	}
	return out
}
