// Package bindings holds what the KV and queue bindings share: the error
// codes of the local store formats, the durability setting, the names of
// the app contract's environment variables and the reading of a binding's
// JSON from them (ReadEnv).
//
// The stores themselves live in the subpackages kv and queue.
package bindings

import (
	"errors"
	"fmt"
)

// Code is one of the error codes the store formats define. Callers match on
// them with errors.Is against the sentinels below.
type Code string

// The codes of the localkv.v1 and localqueue.v1 format specification.
const (
	CodeBindingSetupFailed   Code = "BINDING_SETUP_FAILED"
	CodeInvalidInput         Code = "INVALID_INPUT"
	CodeKVOperationFailed    Code = "KV_OPERATION_FAILED"
	CodeQueueOperationFailed Code = "QUEUE_OPERATION_FAILED"
	CodeLocalFilesystemError Code = "LOCAL_FILESYSTEM_ERROR"
)

// Sentinels, one per code. errors.Is(err, ErrInvalidInput) is true for every
// *Error whose Code is CodeInvalidInput, whatever its message.
var (
	// ErrBindingSetupFailed: a store could not be opened or created (wrong
	// format marker, not a database, a directory where the file should be).
	ErrBindingSetupFailed = &Error{Code: CodeBindingSetupFailed}
	// ErrInvalidInput: the caller passed a key, value, payload, limit or
	// option outside the documented limits. Nothing was written.
	ErrInvalidInput = &Error{Code: CodeInvalidInput}
	// ErrKVOperationFailed: a KV statement failed (I/O, lock timeout).
	ErrKVOperationFailed = &Error{Code: CodeKVOperationFailed}
	// ErrQueueOperationFailed: a queue statement failed, or a receipt was stale.
	ErrQueueOperationFailed = &Error{Code: CodeQueueOperationFailed}
	// ErrLocalFilesystem: the store directory could not be created or read.
	ErrLocalFilesystem = &Error{Code: CodeLocalFilesystemError}
)

// ErrNoStore is wrapped by the error of an open that asked for a store that
// exists (FromEnv: an app opens only what its stack provisioned) when there
// is none; nothing was created. Its code is BINDING_SETUP_FAILED.
var ErrNoStore = errors.New("no such store")

// Error is the error every store operation returns. Msg names the field, the
// limit and the offending value (or its size); Err is the cause, if any.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

// Errorf builds an *Error with a formatted message and no cause.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap builds an *Error with a message and a cause. It returns nil for a nil
// cause, and leaves an *Error cause's code alone.
func Wrap(code Code, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: err}
}

func (e *Error) Error() string {
	switch {
	case e.Msg == "" && e.Err == nil:
		return string(e.Code)
	case e.Err == nil:
		return string(e.Code) + ": " + e.Msg
	case e.Msg == "":
		return string(e.Code) + ": " + e.Err.Error()
	}
	return string(e.Code) + ": " + e.Msg + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is a sentinel (an *Error without a message or
// cause) of the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Err == nil && t.Code == e.Code
}

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Durability says when a commit reaches the disk.
type Durability string

const (
	// DurabilityNormal is WAL with synchronous=NORMAL, the default: nothing
	// committed is lost when a process is killed; an OS crash or power cut
	// may lose the last commits (never corrupts the file).
	DurabilityNormal Durability = "normal"
	// DurabilityFull fsyncs the WAL on every commit: a commit that returned
	// survives a power cut. Commits are bounded by the disk's fsync rate.
	DurabilityFull Durability = "full"
)

// ParseDurability accepts "normal", "full" and "" (normal).
func ParseDurability(s string) (Durability, error) {
	switch Durability(s) {
	case "", DurabilityNormal:
		return DurabilityNormal, nil
	case DurabilityFull:
		return DurabilityFull, nil
	}
	return "", Errorf(CodeInvalidInput, "durability: must be %q or %q, got %q", DurabilityNormal, DurabilityFull, s)
}
