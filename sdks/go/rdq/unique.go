package rdq

import (
	"time"

	"rdq.dev/sdk/go/internal/rdqpb"
)

// Unique makes a submit unique (docs/uniqueness.md): one task at a time
// holds the key, for as long as Hold says, and while it does another submit
// of the key does what OnConflict says. By default it fails with an *Error
// of code CodeUniqueHeld whose Holder is the holding task's id, and nothing
// is written.
//
// Exactly one of Key and KeyFrom. The server checks the values (a bad one
// is a 400 *Error, INVALID_ARGUMENT, whose Field names it: "unique.key",
// "unique.key_from", …); a store without capability unique refuses a unique
// submit with UNSUPPORTED.
type Unique struct {
	// Key is the key itself: 1 to 512 bytes, no control characters.
	Key string
	// KeyFrom are up to 16 JSON pointers (RFC 6901: "/customer_id",
	// "/order/lines/0/sku") into the task's JSON payload: the server derives
	// the key from their values ("sha256:" and the hex SHA-256 of the
	// canonical JSON array of the values), so every client agrees on it
	// whatever the order of the payload's members.
	KeyFrom []string
	// Scope: UniqueScopeQueue (the default, when empty) or
	// UniqueScopeHandler.
	Scope UniqueScope
	// Hold: how long the task holds the key; HoldUntilFinished when empty.
	Hold UniqueHold
	// Duration is how long a HoldFor holds the key after the submit
	// (millisecond precision, 1 ms to ten years); only with HoldFor.
	Duration time.Duration
	// OnConflict: what a submit of a held key does; OnConflictReturn when
	// empty.
	OnConflict OnConflict
}

// UniqueScope is where a unique key must be unique.
type UniqueScope string

const (
	// UniqueScopeQueue: one holder per key in the queue (the default).
	UniqueScopeQueue UniqueScope = "queue"
	// UniqueScopeHandler: one holder per key and handler ref in the queue.
	UniqueScopeHandler UniqueScope = "handler"
)

// UniqueHold is how long a task holds its unique key: an invariant over the
// holder's state, judged when a conflicting submit arrives.
type UniqueHold string

const (
	// HoldUntilStarted: while the holder is PENDING and was never claimed.
	HoldUntilStarted UniqueHold = "until_started"
	// HoldUntilFinished (the default): while the holder is PENDING or
	// IN_FLIGHT, a retry waiting included.
	HoldUntilFinished UniqueHold = "until_finished"
	// HoldUntilSucceeded: until the holder SUCCEEDED or was deleted; a DEAD
	// holder keeps the key.
	HoldUntilSucceeded UniqueHold = "until_succeeded"
	// HoldFor: for Unique.Duration after the holder's submit, whatever its
	// state.
	HoldFor UniqueHold = "for"
	// HoldForever: while the holder is stored.
	HoldForever UniqueHold = "forever"
)

// OnConflict is what a submit of a key another task holds does.
type OnConflict string

const (
	// OnConflictReturn (the default): nothing is written; the submit fails
	// with CodeUniqueHeld naming the holder (Error.Holder).
	OnConflictReturn OnConflict = "return"
	// OnConflictReplace: a PENDING holder takes the submit's payload,
	// content type and headers, and keeps its id, due time, priority and
	// history; the submit answers the holder (Submitted.Existing). A holder
	// that is not PENDING is never replaced: CodeUniqueHeld.
	OnConflictReplace OnConflict = "replace"
	// OnConflictDebounce: as OnConflictReplace, and the holder becomes due
	// when this submit would have (now plus its Delay), so a burst of
	// submits runs once, after the last.
	OnConflictDebounce OnConflict = "debounce"
	// OnConflictExisting: nothing is written; the submit answers the holder
	// as an idempotent repeat does (Submitted.Existing), whatever its state.
	// With HoldForever in UniqueScopeQueue this is an idempotency key: the
	// same key as TaskRequest.IdempotencyKey.
	OnConflictExisting OnConflict = "existing"
)

// uniqueRequest is Unique in a submit's JSON body.
type uniqueRequest struct {
	Key        string   `json:"key,omitempty"`
	KeyFrom    []string `json:"key_from,omitempty"`
	Scope      string   `json:"scope,omitempty"`
	Hold       string   `json:"hold,omitempty"`
	HoldMs     *int64   `json:"hold_ms,omitempty"`
	OnConflict string   `json:"on_conflict,omitempty"`
}

// check refuses what no server would take: a negative Duration (the wire
// has no negative number of milliseconds for it).
func (u *Unique) check() error {
	if u.Duration < 0 {
		return &Error{Code: CodeInvalidArgument, Field: "unique.hold_ms", Detail: "the hold's duration must not be negative"}
	}
	return nil
}

func (u *Unique) request() *uniqueRequest {
	if u == nil {
		return nil
	}
	r := &uniqueRequest{Key: u.Key, KeyFrom: u.KeyFrom, Scope: string(u.Scope), Hold: string(u.Hold), OnConflict: string(u.OnConflict)}
	if u.Duration != 0 {
		ms := u.Duration.Milliseconds()
		r.HoldMs = &ms
	}
	return r
}

func (u *Unique) proto() *rdqpb.UniqueOptions {
	if u == nil {
		return nil
	}
	p := &rdqpb.UniqueOptions{
		Key:        optional(u.Key),
		KeyFrom:    u.KeyFrom,
		Scope:      optional(string(u.Scope)),
		Hold:       optional(string(u.Hold)),
		OnConflict: optional(string(u.OnConflict)),
	}
	if u.Duration != 0 {
		ms := uint64(u.Duration.Milliseconds())
		p.HoldMs = &ms
	}
	return p
}

// optional is s as a proto3 optional string: unset when empty, as the JSON
// body omits it.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
