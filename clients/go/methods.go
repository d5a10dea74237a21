package spawnd

// This file owns one typed method per protocol method (docs/daemon.md's
// table), each a thin call: params in, typed result out.

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Health is the daemon's layers, audit location and protocol version.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.Call(ctx, "health", nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// ConnectorsStatus lists the connectors this peer may act for, with each
// operation and its params.
func (c *Client) ConnectorsStatus(ctx context.Context) (*ConnectorsStatus, error) {
	var s ConnectorsStatus
	if err := c.Call(ctx, "connectors_status", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// SpawnOp runs an operation; the answer comes once the program runs.
func (c *Client) SpawnOp(ctx context.Context, p SpawnOpParams) (*Spawned, error) {
	return c.spawn(ctx, p, p)
}

// Spawn runs a raw envelope; the answer comes once the program runs.
func (c *Client) Spawn(ctx context.Context, p SpawnParams) (*Spawned, error) {
	return c.spawn(ctx, p, p)
}

func (c *Client) spawn(ctx context.Context, req SpawnRequest, params interface{}) (*Spawned, error) {
	var s Spawned
	notifies := req.notifies()
	// Run in the reader goroutine before the next line is read: the
	// daemon writes the answer before any notification about it.
	onResult := func(raw json.RawMessage) {
		if h := handleOf(raw); h != "" {
			c.hold(h, notifies)
			if notifies {
				c.subscription(h)
			}
		}
	}
	onAbandoned := func(raw json.RawMessage) {
		if h := handleOf(raw); h != "" {
			c.hold(h, false)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = c.SpawnRelease(ctx, h)
		}
	}
	if err := c.call(ctx, req.method(), params, &s, onResult, onAbandoned); err != nil {
		return nil, err
	}
	return &s, nil
}

func handleOf(raw json.RawMessage) string {
	var s struct {
		Handle string `json:"handle"`
	}
	_ = json.Unmarshal(raw, &s)
	return s.Handle
}

// SpawnCheck asks the gate alone about SpawnOpParams or SpawnParams:
// nothing runs and nothing is recorded. A refusal is the error SpawnOp or
// Spawn would get (its denial has no audit id).
func (c *Client) SpawnCheck(ctx context.Context, req SpawnRequest) (*Plan, error) {
	var p Plan
	if err := c.Call(ctx, "spawn_check", req, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

type handleParams struct {
	Handle string `json:"handle"`
	WaitMS int64  `json:"wait_ms,omitempty"`
}

// SpawnStatus is the spawn's state and, once ended, its result. With a
// positive wait it blocks up to wait for the end (other calls on the
// connection are answered meanwhile).
func (c *Client) SpawnStatus(ctx context.Context, handle string, wait time.Duration) (*Status, error) {
	var s Status
	if err := c.Call(ctx, "spawn_status", handleParams{handle, millis(wait)}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// SpawnWait waits up to wait for the first of handles (1 to 64 of this
// connection's) to end.
func (c *Client) SpawnWait(ctx context.Context, handles []string, wait time.Duration) (*WaitResult, error) {
	params := struct {
		Handles []string `json:"handles"`
		WaitMS  int64    `json:"wait_ms,omitempty"`
	}{handles, millis(wait)}
	var w WaitResult
	if err := c.Call(ctx, "spawn_wait", params, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

type streamParams struct {
	Handle string `json:"handle"`
	Which  Stream `json:"which"`
}

// SpawnOutputSize is how many bytes of a stream the result keeps.
func (c *Client) SpawnOutputSize(ctx context.Context, handle string, which Stream) (*OutputSize, error) {
	var s OutputSize
	if err := c.Call(ctx, "spawn_output_size", streamParams{handle, which}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// SpawnOutputRead reads up to n bytes of a stream from offset, waiting up
// to wait (when positive) for bytes not yet written. NewOutputReader
// reads a whole stream.
func (c *Client) SpawnOutputRead(ctx context.Context, handle string, which Stream, offset int64, n int, wait time.Duration) (*OutputChunk, error) {
	params := struct {
		Handle string `json:"handle"`
		Which  Stream `json:"which"`
		Offset int64  `json:"offset"`
		Len    int    `json:"len"`
		WaitMS int64  `json:"wait_ms,omitempty"`
	}{handle, which, offset, n, millis(wait)}
	var o OutputChunk
	if err := c.Call(ctx, "spawn_output_read", params, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// Signal is a signal spawn_kill sends to the program.
type Signal string

// The signals spawn_kill sends. SIGKILL kills the whole sandbox; any other
// goes to the program, forwarded by the sandbox's init.
const (
	SIGTERM Signal = "SIGTERM"
	SIGKILL Signal = "SIGKILL"
	SIGINT  Signal = "SIGINT"
	SIGHUP  Signal = "SIGHUP"
	SIGQUIT Signal = "SIGQUIT"
	SIGUSR1 Signal = "SIGUSR1"
	SIGUSR2 Signal = "SIGUSR2"
)

// SpawnKill sends sig to the spawn's program; "" is the daemon's default,
// SIGKILL, which kills the sandbox (its result then says spawn_kill). A
// signal the daemon does not take is ErrInvalidParams naming `signal`.
func (c *Client) SpawnKill(ctx context.Context, handle string, sig Signal) error {
	params := struct {
		Handle string `json:"handle"`
		Signal Signal `json:"signal,omitempty"`
	}{handle, sig}
	return c.Call(ctx, "spawn_kill", params, nil)
}

// Ping tests the connection: the daemon answers at once with its version.
func (c *Client) Ping(ctx context.Context) (*Pong, error) {
	var p Pong
	if err := c.Call(ctx, "ping", nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Metrics returns the daemon's counters and histograms in Prometheus's
// text format (docs/operations.md, "Metrics").
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var m struct {
		Text string `json:"text"`
	}
	if err := c.Call(ctx, "metrics", nil, &m); err != nil {
		return "", err
	}
	return m.Text, nil
}

// SpawnList lists the caller's own spawns, by start time: every handle
// this connection holds, and every detached spawn started by a peer of
// the same uid, attached elsewhere or not (with its token, to take up an
// orphan with SpawnAttach).
func (c *Client) SpawnList(ctx context.Context) (*SpawnList, error) {
	var l SpawnList
	if err := c.Call(ctx, "spawn_list", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// SpawnRelease frees the handle at once, killing a program still running.
// Its notification channel, if any, is closed.
func (c *Client) SpawnRelease(ctx context.Context, handle string) error {
	err := c.Call(ctx, "spawn_release", handleParams{Handle: handle}, nil)
	if err == nil || errors.Is(err, ErrNotFound) {
		c.unhold(handle)
	}
	if err == nil {
		c.dropSubscription(handle)
	}
	return err
}

// SpawnStdinWrite writes data to the stdin of a spawn made with
// StdinStream, and returns once the bytes are in the program's stdin pipe.
// data must fit in a frame (the daemon's max_frame_bytes, 1 MiB by
// default, holds it as base64); a StdinWriter cuts it into frames.
func (c *Client) SpawnStdinWrite(ctx context.Context, handle string, data []byte) (int64, error) {
	params := struct {
		Handle  string `json:"handle"`
		DataB64 []byte `json:"data_b64"`
	}{handle, data}
	if params.DataB64 == nil {
		params.DataB64 = []byte{}
	}
	var r struct {
		Bytes int64 `json:"bytes"`
	}
	if err := c.Call(ctx, "spawn_stdin_write", params, &r); err != nil {
		return 0, err
	}
	return r.Bytes, nil
}

// SpawnStdinClose ends the program's stdin once the writes before it are in.
func (c *Client) SpawnStdinClose(ctx context.Context, handle string) error {
	return c.Call(ctx, "spawn_stdin_close", handleParams{Handle: handle}, nil)
}

// SpawnAttach takes up a detached spawn (made with a Lease, on this or an
// earlier connection of the same uid and gid) with the token its spawn
// answered. Notifications of a spawn made with Notify come to this
// connection from the next new byte on.
func (c *Client) SpawnAttach(ctx context.Context, handle, token string) (*Attached, error) {
	params := struct {
		Handle string `json:"handle"`
		Token  string `json:"token"`
	}{handle, token}
	var a Attached
	if err := c.Call(ctx, "spawn_attach", params, &a); err != nil {
		return nil, err
	}
	c.hold(handle, true)
	return &a, nil
}
