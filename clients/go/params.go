package spawnd

// This file owns what a spawn asks for: the params of spawn_op and spawn
// (and spawn_check, which takes either), encoded as docs/daemon.md's table
// says: durations in whole milliseconds, bytes as base64.

import (
	"encoding/json"
	"time"
)

// Stream names one of a program's output streams (`which`).
type Stream int

// The output streams.
const (
	Stdout Stream = 0
	Stderr Stream = 1
)

func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

// SpawnRequest is a spawn's params: SpawnOpParams or SpawnParams. It is
// what SpawnCheck decides on.
type SpawnRequest interface {
	method() string
	notifies() bool
}

// SpawnOpParams runs a manifest's operation with arguments (spawn_op).
type SpawnOpParams struct {
	Connector string
	Op        string
	// Args are the operation's placeholders' values (connectors_status
	// lists the params).
	Args map[string]string
	Env  map[string]string
	// Cwd is checked against the manifest's scopes; empty for its default.
	Cwd string
	// Stdin is the program's whole stdin (nil: /dev/null). For more than
	// fits in a frame use StdinStream.
	Stdin []byte
	// StdinStream makes stdin a pipe that SpawnStdinWrite (or a
	// StdinWriter) fills and SpawnStdinClose ends.
	StdinStream bool
	// Action is an action subset; it must permit spawn or spawn:<op>.
	Action []string
	// Mode is the invocation's tier ("" is readonly).
	Mode string
	// Timeout tightens the manifest's wall time (never loosens it).
	Timeout time.Duration
	// Label is recorded with the spawn (at most 128 bytes, no control
	// characters).
	Label string
	// Notify asks for spawn_output and spawn_exited notifications: read
	// them from Client.Notifications(handle).
	Notify bool
	// Lease detaches the spawn: it outlives this connection for Lease, and
	// SpawnAttach with the answer's Token takes it up again.
	Lease time.Duration
}

// Envelope is a raw program and argv (spawn); the manifest must bind the
// argv to an operation of the program.
type Envelope struct {
	Program string
	Argv    []string
	Env     map[string]string
	Cwd     string
	// Stdin is the program's whole stdin (nil: /dev/null).
	Stdin []byte
}

// SpawnParams runs a raw envelope (spawn).
type SpawnParams struct {
	Connector   string
	Envelope    Envelope
	StdinStream bool
	Action      []string
	Mode        string
	Timeout     time.Duration
	Label       string
	Notify      bool
	Lease       time.Duration
}

func (SpawnOpParams) method() string   { return "spawn_op" }
func (p SpawnOpParams) notifies() bool { return p.Notify }
func (SpawnParams) method() string     { return "spawn" }
func (p SpawnParams) notifies() bool   { return p.Notify }

// millis is a duration in whole milliseconds, rounded up so that a short
// positive one is never sent as 0 (absent).
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func strings0(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// MarshalJSON encodes the params as spawn_op takes them.
func (p SpawnOpParams) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Connector   string            `json:"connector"`
		Op          string            `json:"op"`
		Args        map[string]string `json:"args"`
		Env         map[string]string `json:"env,omitempty"`
		Cwd         string            `json:"cwd,omitempty"`
		StdinB64    []byte            `json:"stdin_b64,omitempty"`
		StdinStream bool              `json:"stdin_stream,omitempty"`
		Action      []string          `json:"action,omitempty"`
		Mode        string            `json:"mode,omitempty"`
		TimeoutMS   int64             `json:"timeout_ms,omitempty"`
		Label       string            `json:"label,omitempty"`
		Notify      bool              `json:"notify,omitempty"`
		LeaseMS     int64             `json:"lease_ms,omitempty"`
	}{p.Connector, p.Op, strings0(p.Args), p.Env, p.Cwd, p.Stdin, p.StdinStream,
		p.Action, p.Mode, millis(p.Timeout), p.Label, p.Notify, millis(p.Lease)})
}

// MarshalJSON encodes the envelope as spawn takes it.
func (e Envelope) MarshalJSON() ([]byte, error) {
	argv := e.Argv
	if argv == nil {
		argv = []string{}
	}
	return json.Marshal(struct {
		Program  string            `json:"program"`
		Argv     []string          `json:"argv"`
		Env      map[string]string `json:"env"`
		Cwd      string            `json:"cwd,omitempty"`
		StdinB64 []byte            `json:"stdin_b64,omitempty"`
	}{e.Program, argv, strings0(e.Env), e.Cwd, e.Stdin})
}

// MarshalJSON encodes the params as spawn takes them.
func (p SpawnParams) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Connector   string   `json:"connector"`
		Envelope    Envelope `json:"envelope"`
		StdinStream bool     `json:"stdin_stream,omitempty"`
		Action      []string `json:"action,omitempty"`
		Mode        string   `json:"mode,omitempty"`
		TimeoutMS   int64    `json:"timeout_ms,omitempty"`
		Label       string   `json:"label,omitempty"`
		Notify      bool     `json:"notify,omitempty"`
		LeaseMS     int64    `json:"lease_ms,omitempty"`
	}{p.Connector, p.Envelope, p.StdinStream, p.Action, p.Mode, millis(p.Timeout),
		p.Label, p.Notify, millis(p.Lease)})
}
