package spawnd

// This file owns what the daemon answers, as typed values. Each result
// keeps the whole answer in Raw, so keys this version does not name stay
// within reach.

import (
	"encoding/json"
	"fmt"
)

// withRaw is a result that keeps its answer as sent.
type withRaw interface{ setRaw(json.RawMessage) }

func decodeResult(raw json.RawMessage, out interface{}) error {
	if err := json.Unmarshal(raw, out); err != nil {
		return err
	}
	if r, ok := out.(withRaw); ok {
		r.setRaw(raw)
	}
	return nil
}

// Spawned is the answer to a spawn: the handle, and the token of a
// detached one (shown once: keep it to SpawnAttach after a reconnect).
type Spawned struct {
	Handle string          `json:"handle"`
	Token  string          `json:"token,omitempty"`
	Raw    json.RawMessage `json:"-"`
}

// State is a spawn's state, as spawn_status, spawn_wait, spawn_attach and
// spawn_list say it. A state this version does not name is kept as sent.
type State string

// The states of a spawn.
const (
	StateRunning  State = "running"
	StateExited   State = "exited"
	StateSignaled State = "signaled"
	StateTimedOut State = "timed_out"
	// StateFailed: the spawn ended without a result (its spawner died);
	// Status.Error says why.
	StateFailed State = "failed"
)

// Ended says whether the state is one of an ended spawn (any but running).
func (s State) Ended() bool { return s != StateRunning && s != "" }

// Exit is how a program ended: exited with a code, killed by a signal, or
// neither (still running, or a spawn that failed without a result; the
// zero Exit). Take it apart with Exited and Signalled.
type Exit struct {
	kind   exitKind
	code   int
	signal string
	signum int
}

type exitKind uint8

const (
	exitNone exitKind = iota
	exitCode
	exitSignal
)

// ExitCode is the Exit of a program that exited with code.
func ExitCode(code int) Exit { return Exit{kind: exitCode, code: code} }

// ExitSignal is the Exit of a program killed by the signal name (SIGKILL),
// whose number is signum (0 when unknown).
func ExitSignal(name string, signum int) Exit {
	return Exit{kind: exitSignal, signal: name, signum: signum}
}

// Exited is the exit code, and whether the program exited (rather than
// being killed by a signal, or not having ended).
func (e Exit) Exited() (int, bool) { return e.code, e.kind == exitCode }

// Signalled is the name of the signal that killed the program (SIGKILL),
// and whether one did.
func (e Exit) Signalled() (string, bool) { return e.signal, e.kind == exitSignal }

// SignalNumber is the number of the signal that killed the program, and
// whether one did.
func (e Exit) SignalNumber() (int, bool) { return e.signum, e.kind == exitSignal }

// String is "exit code N", "signal NAME" or "no exit".
func (e Exit) String() string {
	switch e.kind {
	case exitCode:
		return fmt.Sprintf("exit code %d", e.code)
	case exitSignal:
		if e.signal == "" {
			return fmt.Sprintf("signal %d", e.signum)
		}
		return "signal " + e.signal
	}
	return "no exit"
}

// Status is spawn_status's answer: the state and, once ended, the run
// result (docs/cli.md, "The run result").
type Status struct {
	State   State  `json:"state"`
	AuditID string `json:"audit_id,omitempty"`
	// Exit is how the program ended: its exit code or the signal that
	// killed it; the zero Exit while it runs and for a failed spawn.
	Exit       Exit  `json:"-"`
	TimedOut   bool  `json:"timed_out"`
	DurationMS int64 `json:"duration_ms"`
	CPUMS      int64 `json:"cpu_ms"`
	// PeakMemoryBytes and OOMKilled as the sandbox's limits saw them.
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	OOMKilled       bool  `json:"oom_killed"`
	// InterruptedBy says who ended the program from outside: spawn_kill,
	// spawn_release, disconnect, lease, shutdown, or "" when no one did.
	InterruptedBy string `json:"interrupted_by,omitempty"`
	// Stdout and Stderr: the bytes the result keeps (up to the caps). In a
	// spawn_exited notification they carry sizes and hashes, no bytes.
	Stdout *StreamResult `json:"stdout,omitempty"`
	Stderr *StreamResult `json:"stderr,omitempty"`
	// Error is why a failed spawn failed.
	Error string `json:"error,omitempty"`
	// Isolation is what confined the program (docs/sandbox.md); nil while
	// it runs.
	Isolation *Isolation `json:"isolation,omitempty"`
	// Network is what the relay saw and refused, for a spawn with network
	// grants or learning (docs/network.md); nil for one without.
	Network *Network        `json:"network,omitempty"`
	Timings json.RawMessage `json:"timings,omitempty"`
	Raw     json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the result, and its exit_code, signal and
// signal_name into Exit.
func (s *Status) UnmarshalJSON(b []byte) error {
	type plain Status
	w := struct {
		*plain
		ExitCode   *int   `json:"exit_code"`
		Signal     *int   `json:"signal"`
		SignalName string `json:"signal_name"`
	}{plain: (*plain)(s)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	switch {
	case w.ExitCode != nil:
		s.Exit = ExitCode(*w.ExitCode)
	case w.Signal != nil || w.SignalName != "":
		n := 0
		if w.Signal != nil {
			n = *w.Signal
		}
		s.Exit = ExitSignal(w.SignalName, n)
	default:
		s.Exit = Exit{}
	}
	return nil
}

// Ended says whether the spawn has ended (any state but running).
func (s *Status) Ended() bool { return s.State.Ended() }

// Success says whether the program exited 0.
func (s *Status) Success() bool {
	code, exited := s.Exit.Exited()
	return s.State == StateExited && exited && code == 0
}

// StreamResult is one stream in a run result.
type StreamResult struct {
	// Text holds the bytes when they are UTF-8, else Base64 does (decoded).
	Text   *string `json:"text,omitempty"`
	Base64 []byte  `json:"base64,omitempty"`
	// Bytes and SHA256 (sha256:<hex>) are over exactly the bytes kept;
	// TotalBytes is what the program wrote.
	Bytes      int64  `json:"bytes"`
	TotalBytes int64  `json:"total_bytes"`
	Truncated  bool   `json:"truncated"`
	SHA256     string `json:"sha256"`
}

// Data is the stream's bytes as the result keeps them.
func (r *StreamResult) Data() []byte {
	if r == nil {
		return nil
	}
	if r.Text != nil {
		return []byte(*r.Text)
	}
	return r.Base64
}

// String is the stream's bytes as text.
func (r *StreamResult) String() string { return string(r.Data()) }

// WaitResult is spawn_wait's answer.
type WaitResult struct {
	// Handle is the first of the handles asked about, in their order,
	// that has ended; "" when none has by the wait.
	Handle string `json:"handle"`
	// State is Handle's state (running when none has ended).
	State State `json:"state"`
	// Ended lists every one of the handles asked about that has ended.
	Ended HandleList      `json:"ended"`
	Raw   json.RawMessage `json:"-"`
}

// HandleList is a list of handles. It decodes from an array of handle
// strings, an array of objects with a "handle" key, or an object keyed by
// handle: docs/daemon.md does not say which spawn_wait's `ended` is.
type HandleList []string

// UnmarshalJSON accepts each of the shapes HandleList names.
func (l *HandleList) UnmarshalJSON(b []byte) error {
	var strs []string
	if json.Unmarshal(b, &strs) == nil {
		*l = strs
		return nil
	}
	var objs []struct {
		Handle string `json:"handle"`
	}
	if json.Unmarshal(b, &objs) == nil {
		out := make([]string, 0, len(objs))
		for _, o := range objs {
			out = append(out, o.Handle)
		}
		*l = out
		return nil
	}
	var byHandle map[string]json.RawMessage
	if err := json.Unmarshal(b, &byHandle); err != nil {
		return fmt.Errorf("ended is neither a list of handles nor an object by handle: %s", b)
	}
	out := make([]string, 0, len(byHandle))
	for h := range byHandle {
		out = append(out, h)
	}
	*l = out
	return nil
}

// Contains says whether h is in the list.
func (l HandleList) Contains(h string) bool {
	for _, x := range l {
		if x == h {
			return true
		}
	}
	return false
}

// OutputSize is spawn_output_size's answer: the bytes the result keeps.
type OutputSize struct {
	Bytes     int64           `json:"bytes"`
	Truncated bool            `json:"truncated"`
	Raw       json.RawMessage `json:"-"`
}

// OutputChunk is spawn_output_read's answer. The data starts at the
// offset asked for plus Skipped (bytes that left the daemon's window
// before this read): the next offset is offset + Skipped + len(Data).
type OutputChunk struct {
	Data    []byte          `json:"data_b64"`
	EOF     bool            `json:"eof"`
	Skipped int64           `json:"skipped"`
	Raw     json.RawMessage `json:"-"`
}

// Attached is spawn_attach's answer: the detached handle now belongs to
// this connection.
type Attached struct {
	Handle string          `json:"handle"`
	State  State           `json:"state"`
	Raw    json.RawMessage `json:"-"`
}

// Pong is ping's answer.
type Pong struct {
	// Version is spawnd's version, as `spawnd --version` prints the number.
	Version string          `json:"version"`
	Raw     json.RawMessage `json:"-"`
}

// SpawnList is spawn_list's answer.
type SpawnList struct {
	// Spawns in the order they started.
	Spawns []SpawnListEntry `json:"spawns"`
	Raw    json.RawMessage  `json:"-"`
}

// SpawnListEntry is one spawn of the caller's.
type SpawnListEntry struct {
	Handle string `json:"handle"`
	State  State  `json:"state"`
	// Label and Op are nil when the spawn has none (Op: a raw envelope).
	Label     *string `json:"label"`
	Connector string  `json:"connector"`
	Op        *string `json:"op"`
	// Detached: made with a Lease. Attached: this connection holds it.
	Detached bool `json:"detached"`
	Attached bool `json:"attached"`
	// LeaseMSLeft is the time left on the lease of a detached spawn that
	// no connection holds, else nil.
	LeaseMSLeft *int64 `json:"lease_ms_left"`
	// Token is the detach token of a detached spawn started by the same
	// uid, else nil: SpawnAttach takes the spawn up with it.
	Token *string `json:"token"`
}

// Health is health's answer.
type Health struct {
	// Status is healthy, needs_setup, degraded or error.
	Status          string          `json:"status"`
	Reasons         []string        `json:"reasons"`
	Kernel          string          `json:"kernel"`
	ProtocolVersion int             `json:"protocol_version"`
	StaleManifests  *StaleManifests `json:"stale_manifests"`
	Raw             json.RawMessage `json:"-"`
}

// StaleManifests is a refused reload: the previous manifests stay in force.
type StaleManifests struct {
	RefusedAt string `json:"refused_at"`
	Error     string `json:"error"`
}

// ConnectorsStatus is connectors_status's answer: the connectors the
// peer may act for, by name, and the block of text for a prompt.
type ConnectorsStatus struct {
	CapturedAt string                `json:"captured_at"`
	Connectors map[string]*Connector `json:"connectors"`
	// Block is the <connector_status> text for a prompt.
	Block string          `json:"block"`
	Raw   json.RawMessage `json:"-"`
}

// Connector is one connector in ConnectorsStatus.
type Connector struct {
	Version string `json:"version"`
	// Status is connected, not_configured, invalid_credentials or
	// disabled_by_admin (then nothing else is shown: do not offer or
	// mention it).
	Status string `json:"status"`
	// Reason or Error, when the status has one.
	Reason     string       `json:"reason,omitempty"`
	Error      string       `json:"error,omitempty"`
	Network    []string     `json:"network,omitempty"`
	Operations []*Operation `json:"operations,omitempty"`
}

// Operation is one operation of a connector.
type Operation struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Mode        string   `json:"mode"`
	Network     []string `json:"network,omitempty"`
	// Params in argv order.
	Params []*Param `json:"params"`
}

// Param is one param of an operation: what SpawnOpParams.Args must hold.
type Param struct {
	Name string `json:"name"`
	// Kind is string or path.
	Kind string `json:"kind"`
	// Required is false for a param with a default or in an optional group.
	Required    bool     `json:"required"`
	Default     *string  `json:"default,omitempty"`
	Values      []string `json:"values,omitempty"`
	Pattern     string   `json:"pattern,omitempty"`
	AllowDash   bool     `json:"allow_dash"`
	AllowEmpty  bool     `json:"allow_empty"`
	MaxLen      int      `json:"max_len"`
	Description string   `json:"description,omitempty"`
}

// Plan is spawn_check's answer when the gate allows: the decision and
// what would run, as `spawnd check --json` prints it.
type Plan struct {
	Decision string   `json:"decision"`
	Argv     []string `json:"argv"`
	// The rest as sent; Raw has every key.
	ArgvShape json.RawMessage `json:"argv_shape,omitempty"`
	Program   json.RawMessage `json:"program,omitempty"`
	Env       json.RawMessage `json:"env,omitempty"`
	FS        json.RawMessage `json:"fs,omitempty"`
	Cwd       json.RawMessage `json:"cwd,omitempty"`
	Network   json.RawMessage `json:"network,omitempty"`
	Limits    json.RawMessage `json:"limits,omitempty"`
	Raw       json.RawMessage `json:"-"`
}

func (r *Spawned) setRaw(b json.RawMessage)          { r.Raw = b }
func (r *Status) setRaw(b json.RawMessage)           { r.Raw = b }
func (r *WaitResult) setRaw(b json.RawMessage)       { r.Raw = b }
func (r *OutputSize) setRaw(b json.RawMessage)       { r.Raw = b }
func (r *OutputChunk) setRaw(b json.RawMessage)      { r.Raw = b }
func (r *Attached) setRaw(b json.RawMessage)         { r.Raw = b }
func (r *Health) setRaw(b json.RawMessage)           { r.Raw = b }
func (r *ConnectorsStatus) setRaw(b json.RawMessage) { r.Raw = b }
func (r *Plan) setRaw(b json.RawMessage)             { r.Raw = b }
func (r *Pong) setRaw(b json.RawMessage)             { r.Raw = b }
func (r *SpawnList) setRaw(b json.RawMessage)        { r.Raw = b }
