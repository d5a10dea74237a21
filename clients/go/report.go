package spawnd

// This file owns the run result's isolation and network sections as typed
// values, field for field as the daemon sends them (src/exec/result.rs
// and src/exec/egress.rs; docs/sandbox.md and docs/network.md say what
// each means).

import "encoding/json"

// Isolation is what confined the program.
type Isolation struct {
	// Namespaces the sandbox has of its own.
	Namespaces []string `json:"namespaces"`
	// Root says how its root was made.
	Root string `json:"root"`
	// NetworkNamespace says which network namespace and what leaves it.
	NetworkNamespace string `json:"network_namespace"`
	// Landlock as init reported it applied; nil without Landlock.
	Landlock *Landlock `json:"landlock"`
	Seccomp  Seccomp   `json:"seccomp"`
	// NoNewPrivs: PR_SET_NO_NEW_PRIVS is set.
	NoNewPrivs bool `json:"no_new_privs"`
	// Capabilities the program holds.
	Capabilities string `json:"capabilities"`
	UID          uint32 `json:"uid"`
	GID          uint32 `json:"gid"`
	// LimitsVia is cgroup or rlimits.
	LimitsVia string `json:"limits_via"`
	Limits    Limits `json:"limits"`
	// MissingReadScopes did not exist and were left out.
	MissingReadScopes []string `json:"missing_read_scopes"`
	// CreatedWriteScopes were created for the spawn.
	CreatedWriteScopes []string `json:"created_write_scopes"`
	// Idmapped are the write scopes mounted idmapped.
	Idmapped []string `json:"idmapped"`
	// Cwd is the program's working directory; FreshCwd says it was a
	// fresh, empty one.
	Cwd      string `json:"cwd"`
	FreshCwd bool   `json:"fresh_cwd"`
	Tmpfs    Tmpfs  `json:"tmpfs"`
}

// Landlock is the Landlock ruleset applied.
type Landlock struct {
	// ABI is the Landlock ABI enforced.
	ABI uint32 `json:"abi"`
	// Status is fully_enforced.
	Status string `json:"status"`
	// AbstractUnixAndSignalScoped: abstract unix sockets and signals are
	// scoped to the sandbox.
	AbstractUnixAndSignalScoped bool    `json:"abstract_unix_and_signal_scoped"`
	Execute                     Execute `json:"execute"`
}

// Execute is what Landlock lets the program execute. Policy is
// "declared" (only Files, Count of them; LimitedTo says so for a reader)
// or "scopes" (files under Directories).
type Execute struct {
	Policy      string           `json:"policy"`
	LimitedTo   string           `json:"limited_to,omitempty"`
	Count       int              `json:"count,omitempty"`
	Files       []ExecutableFile `json:"files,omitempty"`
	Directories []string         `json:"directories,omitempty"`
}

// ExecutableFile is a file exec = "declared" lets the program execute.
type ExecutableFile struct {
	// Path after symlinks.
	Path string `json:"path"`
	// GrantedAs says why it may run (program, interpreter, …).
	GrantedAs string `json:"granted_as"`
	// SHA256 is sha256:<hex> of its bytes when the gate read them.
	SHA256 string `json:"sha256"`
}

// Seccomp is the seccomp filter installed.
type Seccomp struct {
	// Filter is the filter's id (a hash of its program).
	Filter string `json:"filter"`
	// Instructions is its length in BPF instructions.
	Instructions int `json:"instructions"`
	// Arch is the one architecture whose calls it admits.
	Arch string `json:"arch"`
}

// Limits are the limits the spawn ran under.
type Limits struct {
	MaxStdoutBytes   uint64 `json:"max_stdout_bytes"`
	MaxStderrBytes   uint64 `json:"max_stderr_bytes"`
	WallTimeMS       uint64 `json:"wall_time_ms"`
	MaxMemoryBytes   uint64 `json:"max_memory_bytes"`
	MaxProcesses     uint64 `json:"max_processes"`
	MaxFileSizeBytes uint64 `json:"max_file_size_bytes"`
	MaxOpenFiles     uint64 `json:"max_open_files"`
	// TmpSizeBytes is the private /tmp's size; nil: what the memory limit
	// leaves after /dev/shm.
	TmpSizeBytes *uint64 `json:"tmp_size_bytes"`
	TmpExec      bool    `json:"tmp_exec"`
}

// Tmpfs is the private tmpfs mounts.
type Tmpfs struct {
	TmpBytes    uint64 `json:"tmp_bytes"`
	TmpExec     bool   `json:"tmp_exec"`
	DevShmBytes uint64 `json:"dev_shm_bytes"`
}

// Network is the result's network section: totals, each connection that
// reached its server and the first refusal of each kind, how often each
// kind of refusal happened, and the DNS names refused (docs/network.md,
// "What is recorded").
type Network struct {
	Connections int64 `json:"connections"`
	Refused     int64 `json:"refused"`
	BytesUp     int64 `json:"bytes_up"`
	BytesDown   int64 `json:"bytes_down"`
	// Listed are the connections recorded one by one; Unlisted counts the
	// later ones, which ConnectionsUnreported sums by destination.
	Listed                []Connection           `json:"listed"`
	Unlisted              int64                  `json:"unlisted"`
	Refusals              []Refusal              `json:"refusals"`
	RefusalsUnreported    int64                  `json:"refusals_unreported"`
	ConnectionsUnreported []UnreportedConnection `json:"connections_unreported"`
	DNSRefused            []DNSRefusal           `json:"dns_refused"`
	DNSRefusedMore        int64                  `json:"dns_refused_more"`
	// Learning is the mode of a learning spawn (docs/network.md,
	// "Learning"), with the host:port pairs its program Contacted (sorted,
	// each once) and how many more there were.
	Learning          string   `json:"learning,omitempty"`
	Contacted         []string `json:"contacted,omitempty"`
	ContactedUnlisted int64    `json:"contacted_unlisted,omitempty"`
	// Error says why the relay's report is incomplete.
	Error string `json:"error,omitempty"`
	// Violation is the refusal that ended a spawn whose manifest says
	// on_violation = "terminate", as sent.
	Violation json.RawMessage `json:"violation,omitempty"`
}

// Connection is one connection the relay recorded.
type Connection struct {
	// Protocol is tcp, udp or other (with IPProtocol).
	Protocol   string `json:"protocol"`
	IPProtocol *int   `json:"ip_protocol,omitempty"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	// Dialed is the address spawnd dialed, if any.
	Dialed    *string `json:"dialed"`
	Allowed   bool    `json:"allowed"`
	Connected bool    `json:"connected"`
	// Reason is why it was refused or ended otherwise than by both sides
	// closing (docs/network.md, "Reasons"); nil for neither.
	Reason *string `json:"reason"`
	// Denial is the address policy's range that denied it, for
	// resolved_to_denied_address.
	Denial     *string `json:"denial"`
	SNI        *string `json:"sni"`
	Error      *string `json:"error"`
	BytesUp    int64   `json:"bytes_up"`
	BytesDown  int64   `json:"bytes_down"`
	DurationMS int64   `json:"duration_ms"`
}

// Refusal is one kind of refusal (destination, protocol and reason) and
// how often it happened.
type Refusal struct {
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Protocol   string `json:"protocol"`
	IPProtocol *int   `json:"ip_protocol,omitempty"`
	Reason     string `json:"reason"`
	Count      int64  `json:"count"`
}

// UnreportedConnection counts the connections past the listed ones to one
// destination.
type UnreportedConnection struct {
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Count     int64  `json:"count"`
	Refused   int64  `json:"refused"`
	BytesUp   int64  `json:"bytes_up"`
	BytesDown int64  `json:"bytes_down"`
}

// DNSRefusal is a name the DNS stub refused, and the query type.
type DNSRefusal struct {
	Name string `json:"name"`
	Type string `json:"type"`
}
