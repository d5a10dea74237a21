package spawnd

// This file owns the errors: the daemon's JSON-RPC errors as *Error with a
// sentinel per code (docs/daemon.md, "Error codes"), the denial object and
// the invalid-name data they carry, and the loss of the connection.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The daemon's error codes (docs/daemon.md).
const (
	CodeParse              = -32700
	CodeInvalidRequest     = -32600
	CodeUnknownMethod      = -32601
	CodeInvalidParams      = -32602
	CodeDenied             = -32001
	CodeNotFound           = -32002
	CodeOverloaded         = -32003
	CodeSandboxUnavailable = -32004
	CodeCredential         = -32005
	CodeAuditUnavailable   = -32006
	CodeInternal           = -32603
	// CodeRequestCancelled answers a wait or probe ended by
	// $/cancelRequest (MethodCancelRequest).
	CodeRequestCancelled = -32800
)

// Sentinels for errors.Is, one per code: errors.Is(err, ErrDenied) holds
// for an *Error with code -32001.
var (
	ErrParse              = errors.New("spawnd: parse error")
	ErrInvalidRequest     = errors.New("spawnd: invalid request")
	ErrUnknownMethod      = errors.New("spawnd: unknown method")
	ErrInvalidParams      = errors.New("spawnd: invalid params")
	ErrDenied             = errors.New("spawnd: capability denied")
	ErrNotFound           = errors.New("spawnd: not found")
	ErrOverloaded         = errors.New("spawnd: overloaded")
	ErrSandboxUnavailable = errors.New("spawnd: sandbox unavailable")
	ErrCredential         = errors.New("spawnd: credential")
	ErrAuditUnavailable   = errors.New("spawnd: audit trail unavailable")
	ErrInternal           = errors.New("spawnd: internal error")
	ErrRequestCancelled   = errors.New("spawnd: request cancelled")
	// ErrFrameTooLarge is a request line over the daemon's
	// max_frame_bytes (-32600 with data.max_frame_bytes). The connection
	// stays open; send large stdin with SpawnOpParams.StdinStream.
	ErrFrameTooLarge = errors.New("spawnd: frame too large")
)

var sentinels = map[int]error{
	CodeParse:              ErrParse,
	CodeInvalidRequest:     ErrInvalidRequest,
	CodeUnknownMethod:      ErrUnknownMethod,
	CodeInvalidParams:      ErrInvalidParams,
	CodeDenied:             ErrDenied,
	CodeNotFound:           ErrNotFound,
	CodeOverloaded:         ErrOverloaded,
	CodeSandboxUnavailable: ErrSandboxUnavailable,
	CodeCredential:         ErrCredential,
	CodeAuditUnavailable:   ErrAuditUnavailable,
	CodeInternal:           ErrInternal,
	CodeRequestCancelled:   ErrRequestCancelled,
}

// Error is an error the daemon answered.
type Error struct {
	Code    int
	Message string
	// Data is the error's data as sent: the denial object for -32001 and
	// -32005 (and for a refusal that is -32002: an unknown connector or
	// operation), {field, bytes, audit_id} for an invalid name,
	// {max_frame_bytes} for an oversized frame, {handle} for a handle not
	// found, the limit that refused for -32003 (Overload).
	Data json.RawMessage
	// Method is the method of the call answered; empty for an error the
	// daemon sent with id null.
	Method string
}

// Error is one line: the method, the message with its line breaks made
// spaces, the code and, for a denial, its reason. The details are fields:
// Code, Message and Data here, the denial's in Denial().
func (e *Error) Error() string {
	detail := fmt.Sprint(e.Code)
	if d := e.Denial(); d != nil {
		detail += ", " + oneLine(d.Reason)
	}
	if e.Method == "" {
		return fmt.Sprintf("spawnd: %s (%s)", oneLine(e.Message), detail)
	}
	return fmt.Sprintf("spawnd: %s: %s (%s)", e.Method, oneLine(e.Message), detail)
}

// oneLine is text with each run of white space, line breaks included,
// made one space, so that an error prints as one line of a log.
func oneLine(text string) string {
	return strings.Join(strings.Fields(text), " ")
}

// Is matches the sentinel of e's code, and ErrFrameTooLarge.
func (e *Error) Is(target error) bool {
	if target == ErrFrameTooLarge {
		_, ok := e.MaxFrameBytes()
		return ok
	}
	s, ok := sentinels[e.Code]
	return ok && s == target
}

// As fills a **Denial with the denial object e carries, an
// **InvalidName with the invalid-name data, and an **Overload with the
// limit of a -32003.
func (e *Error) As(target interface{}) bool {
	switch t := target.(type) {
	case **Denial:
		d := e.Denial()
		if d != nil {
			*t = d
		}
		return d != nil
	case **InvalidName:
		n := e.InvalidName()
		if n != nil {
			*t = n
		}
		return n != nil
	case **Overload:
		o := e.Overload()
		if o != nil {
			*t = o
		}
		return o != nil
	}
	return false
}

// Denial is the denial object the data of a refusal carries, or nil.
func (e *Error) Denial() *Denial {
	var d Denial
	if len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil || d.Reason == "" {
		return nil
	}
	d.Raw = e.Data
	d.Code = e.Code
	return &d
}

// InvalidName is the data of an invalid connector or op name, or nil.
func (e *Error) InvalidName() *InvalidName {
	var n InvalidName
	if e.Code != CodeInvalidParams || len(e.Data) == 0 || json.Unmarshal(e.Data, &n) != nil || n.Field == "" {
		return nil
	}
	return &n
}

// MaxFrameBytes is the daemon's frame limit an oversized-frame error names.
func (e *Error) MaxFrameBytes() (int, bool) {
	if e.Code != CodeInvalidRequest || len(e.Data) == 0 {
		return 0, false
	}
	var d struct {
		Max *int `json:"max_frame_bytes"`
	}
	if json.Unmarshal(e.Data, &d) != nil || d.Max == nil {
		return 0, false
	}
	return *d.Max, true
}

// Overload is the data of a -32003 refusal: the limit that refused, and
// what the caller and everyone use of it. Take it out of an error with
// errors.As(err, &overload) or Error.Overload.
type Overload struct {
	// Limit names the limit: a config key of the daemon's pools
	// ("server.running_spawns_share", "server.max_running_spawns",
	// "server.buffered_output_share_bytes", …) or a per-connection bound
	// ("waits_in_progress_per_connection",
	// "probes_in_progress_per_connection").
	Limit string `json:"limit"`
	// Max is the limit's value.
	Max int64 `json:"max"`
	// Asked is what the refused request asked for (0 when the limit does
	// not say, as for the per-connection bounds).
	Asked int64 `json:"asked"`
	// CallerUses is what the caller holds of it: its uid's for a pool, this
	// connection's for a per-connection bound.
	CallerUses int64 `json:"caller_uses"`
	// AllUse is what every caller holds together (0 when the limit does
	// not say).
	AllUse int64 `json:"all_use"`
	// Raw is the whole data object, with keys this version does not name.
	Raw json.RawMessage `json:"-"`
}

func (o *Overload) Error() string {
	return fmt.Sprintf("spawnd: at the limit %s (%d; the caller uses %d)", oneLine(o.Limit), o.Max, o.CallerUses)
}

// Overload is the limit a -32003 names, or nil (another code, or a
// refusal without data).
func (e *Error) Overload() *Overload {
	var o Overload
	if e.Code != CodeOverloaded || len(e.Data) == 0 || json.Unmarshal(e.Data, &o) != nil || o.Limit == "" {
		return nil
	}
	o.Raw = e.Data
	return &o
}

// NotFoundHandle is the handle a -32002 says is not found (its data
// {handle}), or "" for another error.
func (e *Error) NotFoundHandle() string {
	var d struct {
		Handle string `json:"handle"`
	}
	if e.Code != CodeNotFound || len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil {
		return ""
	}
	return d.Handle
}

// Denial is the gate's refusal (docs/cli.md, "Denial reasons"). Take it
// out of an error with errors.As(err, &denial).
type Denial struct {
	// Class is capability_denied, or the credential reason itself.
	Class    string `json:"class"`
	Boundary string `json:"boundary"`
	// BoundaryDetail says which boundary refused: connector_manifest,
	// envelope, action, vault, caller, operator_config.
	BoundaryDetail string `json:"boundary_detail"`
	// Reason is the precise reason (op_unknown, option_injection, …).
	Reason    string   `json:"reason"`
	Connector string   `json:"connector"`
	Requested string   `json:"requested"`
	Granted   []string `json:"granted"`
	// Placeholder is the placeholder concerned, as {name}, when there is one.
	Placeholder string `json:"placeholder,omitempty"`
	// Message says what was refused and how to fix it.
	Message string `json:"message"`
	// AuditID is the audit record of the refusal; empty for spawn_check,
	// which records nothing.
	AuditID string `json:"audit_id,omitempty"`
	// Code is the JSON-RPC code the denial came with: -32001, -32005 for
	// a credential, -32002 for an unknown connector or operation.
	Code int `json:"-"`
	// Raw is the whole object, with keys this version does not name.
	Raw json.RawMessage `json:"-"`
}

func (d *Denial) Error() string {
	return fmt.Sprintf("spawnd: denied (%s): %s", oneLine(d.Reason), oneLine(d.Message))
}

// InvalidName is the data of a call whose connector or op is not a valid
// name (-32602): which field and its length, never its bytes.
type InvalidName struct {
	Field   string `json:"field"`
	Bytes   int    `json:"bytes"`
	AuditID string `json:"audit_id,omitempty"`
}

func (n *InvalidName) Error() string {
	return fmt.Sprintf("spawnd: invalid %s (%d bytes)", oneLine(n.Field), n.Bytes)
}

// ErrClosed is returned by calls after, or in flight at, Close.
var ErrClosed = errors.New("spawnd: client closed")

// ErrConnectionLost matches every *ConnectionError.
var ErrConnectionLost = errors.New("spawnd: connection lost")

// ConnectionError is a connection that could not be made or that ended.
type ConnectionError struct {
	Path string
	// Lost is true for a connection that was made and then ended (false:
	// it could not be made).
	Lost bool
	// Handles are the handles the connection held when it was lost: they
	// ended with it (programs killed, detached ones parked for their
	// lease), and the client does not dial again. Empty when it held none;
	// the next call then dials again.
	Handles []string
	// Err is the cause: the dial error, io.EOF when the daemon closed the
	// connection, a write error.
	Err error
	// Last is the last error the daemon sent with id null before it
	// closed (an idle or frame timeout, overload at connect), if any.
	Last *Error
}

// Error is one line: the socket, the cause, what the daemon said, and
// the handles lost with the connection.
func (e *ConnectionError) Error() string {
	what := "connection to"
	if e.Lost {
		what = "lost the connection to"
	}
	msg := fmt.Sprintf("spawnd: %s %s: %s", what, e.Path, oneLine(fmt.Sprint(e.Err)))
	if e.Last != nil {
		msg += fmt.Sprintf(" (the daemon said: %s)", oneLine(e.Last.Message))
	}
	if len(e.Handles) > 0 {
		msg += fmt.Sprintf("; its %d handles were lost with it: %s", len(e.Handles), strings.Join(e.Handles, ", "))
	}
	return msg
}

func (e *ConnectionError) Unwrap() error { return e.Err }

// Is matches ErrConnectionLost.
func (e *ConnectionError) Is(target error) bool { return target == ErrConnectionLost }
