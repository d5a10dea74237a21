package spawnd_test

// The client against a scripted peer: what it writes and how it reads
// answers, notifications and errors, exactly as docs/daemon.md words the
// wire, with no daemon and no timing.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"spawnd.dev/go/spawnd"
)

// peer is the daemon's end of one connection, driven by a test.
type peer struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
	mu   sync.Mutex
}

// wireRequest is a request line as the peer reads it.
type wireRequest struct {
	ID     uint64                 `json:"id"`
	Method string                 `json:"method"`
	Params map[string]interface{} `json:"params"`
	Bytes  int                    `json:"-"`
	// HasID is false for a notification (a line without an id).
	HasID bool `json:"-"`
}

// connected is a client and the peer it talks to.
func connected(t *testing.T) (*spawnd.Client, *peer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spawnd.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			accepted <- conn
		}
	}()
	c, err := spawnd.Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	conn := <-accepted
	t.Cleanup(func() { _ = conn.Close() })
	return c, &peer{t: t, conn: conn, r: bufio.NewReaderSize(conn, 1<<20)}
}

func (p *peer) read() wireRequest {
	p.t.Helper()
	_ = p.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := p.r.ReadBytes('\n')
	if err != nil {
		p.t.Fatalf("peer: read a request: %v", err)
	}
	var req wireRequest
	if err := json.Unmarshal(line, &req); err != nil {
		p.t.Fatalf("peer: request %q: %v", line, err)
	}
	req.Bytes = len(line) - 1
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(line, &keys)
	_, req.HasID = keys["id"]
	return req
}

func (p *peer) send(v interface{}) {
	p.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.conn.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("peer: write: %v", err)
	}
}

func (p *peer) answer(id uint64, result interface{}) {
	p.send(map[string]interface{}{"jsonrpc": "2.0", "id": id, "result": result})
}

func (p *peer) fail(id interface{}, code int, message string, data interface{}) {
	e := map[string]interface{}{"code": code, "message": message}
	if data != nil {
		e["data"] = data
	}
	p.send(map[string]interface{}{"jsonrpc": "2.0", "id": id, "error": e})
}

func (p *peer) notify(method string, params interface{}) {
	p.send(map[string]interface{}{"jsonrpc": "2.0", "method": method, "params": params})
}

// async runs a call and gives its error on a channel.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func TestWireAnswersInAnyOrderReachTheirOwnCalls(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	results := make([]string, 2)
	first := async(func() error { return c.Call(ctx, "first", nil, &results[0]) })
	a := p.read()
	second := async(func() error { return c.Call(ctx, "second", nil, &results[1]) })
	b := p.read()
	if a.Method != "first" || b.Method != "second" || a.ID == b.ID {
		t.Fatalf("requests %+v %+v", a, b)
	}
	p.answer(b.ID, "for second")
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	p.answer(a.ID, "for first")
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if results[0] != "for first" || results[1] != "for second" {
		t.Fatalf("results %q", results)
	}
}

func TestWireManyGoroutinesShareOneConnection(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	const n = 200
	go func() {
		// Answer in reverse order of arrival, in batches of 50.
		for batch := 0; batch < n/50; batch++ {
			var reqs []wireRequest
			for i := 0; i < 50; i++ {
				reqs = append(reqs, p.read())
			}
			for i := len(reqs) - 1; i >= 0; i-- {
				p.answer(reqs[i].ID, reqs[i].Params["n"])
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var got int
			if err := c.Call(ctx, "echo", map[string]int{"n": i}, &got); err != nil {
				errs <- err
			} else if got != i {
				errs <- fmt.Errorf("call %d got %d", i, got)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestWireParamsAreEncodedAsTheProtocolSays(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	done := async(func() error {
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: "local://x/y", Op: "run",
			Stdin: []byte{0, 1, 2}, Timeout: 1500 * time.Millisecond, Lease: time.Nanosecond,
			Mode: "write", Action: []string{"spawn"}, Label: "job-1", Notify: true})
		return err
	})
	r := p.read()
	want := map[string]interface{}{"connector": "local://x/y", "op": "run", "args": map[string]interface{}{},
		"stdin_b64": "AAEC", "timeout_ms": 1500.0, "lease_ms": 1.0, "mode": "write",
		"action": []interface{}{"spawn"}, "label": "job-1", "notify": true}
	if r.Method != "spawn_op" || fmt.Sprint(r.Params) != fmt.Sprint(want) {
		t.Fatalf("spawn_op params\n got %v\nwant %v", r.Params, want)
	}
	p.answer(r.ID, map[string]string{"handle": "h-1", "token": "t"})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done = async(func() error {
		_, err := c.Spawn(ctx, spawnd.SpawnParams{Connector: "local://x/y",
			Envelope: spawnd.Envelope{Program: "/usr/bin/bash", Argv: []string{"bash"}}, StdinStream: true})
		return err
	})
	r = p.read()
	want = map[string]interface{}{"connector": "local://x/y", "stdin_stream": true,
		"envelope": map[string]interface{}{"program": "/usr/bin/bash", "argv": []interface{}{"bash"}, "env": map[string]interface{}{}}}
	if r.Method != "spawn" || fmt.Sprint(r.Params) != fmt.Sprint(want) {
		t.Fatalf("spawn params\n got %v\nwant %v", r.Params, want)
	}
	p.answer(r.ID, map[string]string{"handle": "h-2"})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done = async(func() error {
		_, err := c.SpawnOutputRead(ctx, "h-2", spawnd.Stderr, 10, 20, 2*time.Second)
		return err
	})
	r = p.read()
	want = map[string]interface{}{"handle": "h-2", "which": 1.0, "offset": 10.0, "len": 20.0, "wait_ms": 2000.0}
	if r.Method != "spawn_output_read" || fmt.Sprint(r.Params) != fmt.Sprint(want) {
		t.Fatalf("spawn_output_read params\n got %v\nwant %v", r.Params, want)
	}
	p.answer(r.ID, map[string]interface{}{"data_b64": "", "eof": true, "skipped": 0})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWireNotificationsRightAfterTheSpawnAnswerAreKept(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	spawned := make(chan *spawnd.Spawned, 1)
	done := async(func() error {
		s, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: "local://x/y", Op: "run", Notify: true})
		spawned <- s
		return err
	})
	r := p.read()
	// The answer and the notifications in one write: the client must
	// queue them before its caller asks for the channel.
	p.mu.Lock()
	var burst bytes.Buffer
	for _, v := range []interface{}{
		map[string]interface{}{"jsonrpc": "2.0", "id": r.ID, "result": map[string]string{"handle": "h-9"}},
		map[string]interface{}{"jsonrpc": "2.0", "method": "spawn_output", "params": map[string]interface{}{
			"handle": "h-9", "which": 0, "offset": 0, "skipped": 0, "data_b64": base64.StdEncoding.EncodeToString([]byte("hi\n"))}},
		map[string]interface{}{"jsonrpc": "2.0", "method": "spawn_exited", "params": map[string]interface{}{
			"handle": "h-9", "status": map[string]interface{}{"state": "exited", "exit_code": 0,
				"stdout": map[string]interface{}{"bytes": 3, "total_bytes": 3, "truncated": false, "sha256": "sha256:x"}}}},
	} {
		b, _ := json.Marshal(v)
		burst.Write(append(b, '\n'))
	}
	_, _ = p.conn.Write(burst.Bytes())
	p.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := <-spawned
	var got []spawnd.Notification
	for n := range c.Notifications(s.Handle) {
		got = append(got, n)
	}
	if len(got) != 2 || got[0].Method != spawnd.MethodSpawnOutput || string(got[0].Data) != "hi\n" ||
		got[1].Method != spawnd.MethodSpawnExited || !got[1].Status.Success() || got[1].Status.Stdout.Bytes != 3 {
		t.Fatalf("notifications %+v", got)
	}
}

func TestWireASlowNotificationReaderLosesBytesNotTheConnection(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	spawned := async(func() error {
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: "local://x/y", Op: "run", Notify: true})
		return err
	})
	p.answer(p.read().ID, map[string]string{"handle": "h-slow"})
	if err := <-spawned; err != nil {
		t.Fatal(err)
	}
	ch := c.Notifications("h-slow")
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	const chunks = 2 * spawnd.NotificationBuffer / (64 << 10)
	for i := 0; i < chunks; i++ {
		p.notify("spawn_output", map[string]interface{}{"handle": "h-slow", "which": 0,
			"offset": i * len(chunk), "skipped": 0, "data_b64": base64.StdEncoding.EncodeToString(chunk)})
	}
	p.notify("spawn_exited", map[string]interface{}{"handle": "h-slow", "status": map[string]string{"state": "exited"}})
	// Nobody has read the channel, and calls are still answered.
	done := async(func() error { return c.Call(ctx, "ping", nil, nil) })
	p.answer(p.read().ID, true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var next, skipped, data int64
	exited := false
	for n := range ch {
		if n.Method == spawnd.MethodSpawnExited {
			exited = true
			continue
		}
		if n.Offset-n.Skipped != next {
			t.Fatalf("notification at offset %d after %d skipped, want %d", n.Offset, n.Skipped, next)
		}
		next = n.Offset + int64(len(n.Data))
		skipped += n.Skipped
		data += int64(len(n.Data))
	}
	if !exited || next != int64(chunks*len(chunk)) || skipped == 0 || data+skipped != next {
		t.Fatalf("exited %v, next %d, data %d, skipped %d", exited, next, data, skipped)
	}
}

func TestWireAnOversizedFrameErrorFailsOnlyTheCallsOverTheLimit(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	small := async(func() error { return c.Call(ctx, "small", nil, nil) })
	rs := p.read()
	big := async(func() error {
		return c.Call(ctx, "big", map[string]string{"pad": string(bytes.Repeat([]byte("x"), 5000))}, nil)
	})
	rb := p.read()
	if rb.Bytes <= 1000 || rs.Bytes > 1000 {
		t.Fatalf("frames of %d and %d bytes", rs.Bytes, rb.Bytes)
	}
	p.fail(nil, -32600, "frame over 1000 bytes ([server] max_frame_bytes)", map[string]int{"max_frame_bytes": 1000})
	err := <-big
	var e *spawnd.Error
	if !errors.Is(err, spawnd.ErrFrameTooLarge) || !errors.Is(err, spawnd.ErrInvalidRequest) || !errors.As(err, &e) || e.Method != "big" {
		t.Fatalf("big call: %v", err)
	}
	if n, ok := e.MaxFrameBytes(); !ok || n != 1000 {
		t.Fatalf("max_frame_bytes %d %v", n, ok)
	}
	p.answer(rs.ID, "ok")
	if err := <-small; err != nil {
		t.Fatalf("small call: %v", err)
	}
	if c.Err() != nil {
		t.Fatalf("the connection ended: %v", c.Err())
	}
}

func TestWireALostConnectionFailsEveryCallInFlight(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	spawned := async(func() error { _, err := c.SpawnOp(ctx, sh("sleep 60")); return err })
	p.answer(p.read().ID, map[string]string{"handle": "h"})
	if err := <-spawned; err != nil {
		t.Fatal(err)
	}
	call := async(func() error { _, err := c.SpawnStatus(ctx, "h", time.Minute); return err })
	p.read()
	p.fail(nil, -32600, "the daemon is shutting down", nil)
	_ = p.conn.Close()
	err := <-call
	var ce *spawnd.ConnectionError
	if !errors.Is(err, spawnd.ErrConnectionLost) || !errors.As(err, &ce) || ce.Last == nil || ce.Last.Code != -32600 {
		t.Fatalf("call in flight: %v", err)
	}
	<-c.Done()
	// The connection held a handle: it is not dialed again, and the error
	// says the handle went with it.
	_, err = c.Health(ctx)
	if !errors.Is(err, spawnd.ErrConnectionLost) || !errors.As(err, &ce) || !reflect.DeepEqual(ce.Handles, []string{"h"}) ||
		!strings.Contains(err.Error(), "handles were lost with it: h") {
		t.Fatalf("call after the loss: %v", err)
	}
}

func TestWireCallsAfterCloseAreErrClosed(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	call := async(func() error { return c.Call(ctx, "slow", nil, nil) })
	p.read()
	_ = c.Close()
	if err := <-call; !errors.Is(err, spawnd.ErrClosed) {
		t.Fatalf("call in flight at Close: %v", err)
	}
	if _, err := c.Health(ctx); !errors.Is(err, spawnd.ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

func TestWireASpawnWhoseCallerGaveUpIsReleased(t *testing.T) {
	c, p := connected(t)
	ctx, cancel := context.WithCancel(testContext(t))
	done := async(func() error {
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: "local://x/y", Op: "run"})
		return err
	})
	r := p.read()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("spawn: %v", err)
	}
	p.answer(r.ID, map[string]string{"handle": "h-late"})
	rel := p.read()
	if rel.Method != "spawn_release" || rel.Params["handle"] != "h-late" {
		t.Fatalf("after the late answer: %+v", rel)
	}
}

func TestWireErrorsMatchTheirCodes(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	for code, sentinel := range map[int]error{
		-32700: spawnd.ErrParse, -32600: spawnd.ErrInvalidRequest, -32601: spawnd.ErrUnknownMethod,
		-32602: spawnd.ErrInvalidParams, -32001: spawnd.ErrDenied, -32002: spawnd.ErrNotFound,
		-32003: spawnd.ErrOverloaded, -32004: spawnd.ErrSandboxUnavailable, -32005: spawnd.ErrCredential,
		-32006: spawnd.ErrAuditUnavailable, -32603: spawnd.ErrInternal,
	} {
		done := async(func() error { return c.Call(ctx, "m", nil, nil) })
		p.fail(p.read().ID, code, "why", nil)
		err := <-done
		var e *spawnd.Error
		if !errors.Is(err, sentinel) || !errors.As(err, &e) || e.Code != code || e.Message != "why" {
			t.Errorf("code %d: %v", code, err)
		}
		if errors.Is(err, spawnd.ErrFrameTooLarge) || errors.Is(err, spawnd.ErrConnectionLost) {
			t.Errorf("code %d matches too much: %v", code, err)
		}
	}
	denial := map[string]interface{}{"class": "capability_denied", "boundary": "sandbox",
		"boundary_detail": "envelope", "reason": "option_injection", "connector": "local://x/y",
		"requested": "arg:a", "granted": []string{}, "placeholder": "{a}", "message": "m", "audit_id": "a-1", "future": 1}
	done := async(func() error {
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: "local://x/y", Op: "run"})
		return err
	})
	p.fail(p.read().ID, -32001, "denied (option_injection): m", denial)
	err := <-done
	var d *spawnd.Denial
	if !errors.Is(err, spawnd.ErrDenied) || !errors.As(err, &d) || d.Reason != "option_injection" ||
		d.AuditID != "a-1" || d.Placeholder != "{a}" || d.Code != -32001 || !bytes.Contains(d.Raw, []byte(`"future"`)) {
		t.Fatalf("denial: %v %+v", err, d)
	}
	done = async(func() error {
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: "bad name", Op: "run"})
		return err
	})
	p.fail(p.read().ID, -32602, "connector is not a valid connector FQN (8 bytes)", map[string]interface{}{"field": "connector", "bytes": 8, "audit_id": "a-2"})
	err = <-done
	var n *spawnd.InvalidName
	if !errors.Is(err, spawnd.ErrInvalidParams) || !errors.As(err, &n) || n.Field != "connector" || n.Bytes != 8 {
		t.Fatalf("invalid name: %v %+v", err, n)
	}
	var none *spawnd.Denial
	if errors.As(err, &none) {
		t.Fatalf("an invalid name is no denial: %+v", none)
	}
}

func TestWireAStdinWriterShrinksItsFramesToTheDaemonsLimit(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	data := bytes.Repeat([]byte("0123456789"), 500)
	w := c.NewStdinWriter(ctx, "h-in")
	w.ChunkSize = 3000
	done := async(func() error {
		if _, err := w.Write(data); err != nil {
			return err
		}
		return w.Close()
	})
	first := p.read()
	if first.Method != "spawn_stdin_write" || first.Bytes <= 2000 {
		t.Fatalf("first write: %s, %d bytes", first.Method, first.Bytes)
	}
	p.fail(nil, -32600, "frame over 2000 bytes ([server] max_frame_bytes)", map[string]int{"max_frame_bytes": 2000})
	var got []byte
	for {
		r := p.read()
		if r.Method == "spawn_stdin_close" {
			p.answer(r.ID, map[string]interface{}{})
			break
		}
		if r.Bytes > 2000 {
			t.Fatalf("a frame of %d bytes after the limit was told", r.Bytes)
		}
		chunk, err := base64.StdEncoding.DecodeString(r.Params["data_b64"].(string))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, chunk...)
		p.answer(r.ID, map[string]int{"bytes": len(chunk)})
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("the program got %d bytes, want %d", len(got), len(data))
	}
}

func TestWireSpawnWaitsEndedDecodesFromEachShape(t *testing.T) {
	for _, raw := range []string{`["h-1","h-2"]`, `[{"handle":"h-1"},{"handle":"h-2","state":"exited"}]`, `{"h-1":{},"h-2":{}}`} {
		var w spawnd.WaitResult
		if err := json.Unmarshal([]byte(`{"handle":"h-1","state":"exited","ended":`+raw+`}`), &w); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if len(w.Ended) != 2 || !w.Ended.Contains("h-1") || !w.Ended.Contains("h-2") || w.Ended.Contains("h-3") {
			t.Fatalf("%s: %v", raw, w.Ended)
		}
	}
}

// handlesOf is the handles a spawn_wait names.
func handlesOf(t *testing.T, r wireRequest) []string {
	t.Helper()
	raw, ok := r.Params["handles"].([]interface{})
	if !ok {
		t.Fatalf("%s without handles: %+v", r.Method, r.Params)
	}
	out := make([]string, len(raw))
	for i, h := range raw {
		out[i] = h.(string)
	}
	return out
}

// cancelled is the id a $/cancelRequest names, after checking that it
// came as a notification.
func cancelled(t *testing.T, r wireRequest) uint64 {
	t.Helper()
	if r.Method != spawnd.MethodCancelRequest || r.HasID {
		t.Fatalf("want a $/cancelRequest notification, got %+v (with an id: %v)", r, r.HasID)
	}
	id, ok := r.Params["id"].(float64)
	if !ok {
		t.Fatalf("$/cancelRequest without a numeric id: %+v", r.Params)
	}
	return uint64(id)
}

// untilOneSpawnWaitNames reads the spawn_waits of the Wait loop (and the
// cancellations of those it restarts) until one names every handle in
// want, and fails if a second spawn_wait is ever in flight or anything
// else comes. It returns that spawn_wait.
func untilOneSpawnWaitNames(t *testing.T, p *peer, want []string) wireRequest {
	t.Helper()
	inFlight := map[uint64]bool{}
	restarts := 0
	for {
		r := p.read()
		switch r.Method {
		case "spawn_wait":
			if len(inFlight) != 0 {
				t.Fatalf("a second spawn_wait in flight: %d with %v", r.ID, inFlight)
			}
			if _, asks := r.Params["wait_ms"]; !asks {
				t.Fatalf("spawn_wait without wait_ms: %+v", r.Params)
			}
			inFlight[r.ID] = true
			got := handlesOf(t, r)
			all := len(got) == len(want)
			for _, h := range want {
				all = all && containsString(got, h)
			}
			if all {
				t.Logf("one spawn_wait over %d handles after %d restarts", len(want), restarts)
				return r
			}
		case spawnd.MethodCancelRequest:
			id := cancelled(t, r)
			if !inFlight[id] {
				t.Fatalf("$/cancelRequest of %d, which is not the spawn_wait in flight (%v)", id, inFlight)
			}
			delete(inFlight, id)
			restarts++
		default:
			t.Fatalf("the Wait loop sent %s %+v", r.Method, r.Params)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestWireSixtyFourWaitsShareOneSpawnWaitAndReadEachStatusWithoutWaiting(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	handles := make([]string, spawnd.MaxWaitHandles)
	for i := range handles {
		handles[i] = fmt.Sprintf("h-%02d", i)
	}
	results := make(chan error, len(handles))
	for _, h := range handles {
		go func(h string) {
			st, err := c.Wait(ctx, h)
			if err == nil && !st.Success() {
				err = fmt.Errorf("%s: status %+v", h, st)
			}
			results <- err
		}(h)
	}
	// Every restart cancels the spawn_wait before it, so exactly one is in
	// flight however the 64 Waits join; no Wait sends anything itself.
	all := untilOneSpawnWaitNames(t, p, handles)
	p.answer(all.ID, map[string]interface{}{"handle": handles[0], "state": "exited", "ended": handles})
	// Each Wait reads its handle's final status once, without a wait.
	asked := map[string]bool{}
	for range handles {
		r := p.read()
		h, _ := r.Params["handle"].(string)
		if _, waits := r.Params["wait_ms"]; r.Method != "spawn_status" || waits || asked[h] || !containsString(handles, h) {
			t.Fatalf("after the spawn_wait's answer: %s %+v", r.Method, r.Params)
		}
		asked[h] = true
		p.answer(r.ID, map[string]interface{}{"state": "exited", "exit_code": 0})
	}
	for range handles {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	// Nobody waits: the loop has stopped, and the next line is the next call.
	done := async(func() error { return c.Call(ctx, "ping", nil, nil) })
	if r := p.read(); r.Method != "ping" {
		t.Fatalf("after every Wait returned: %s %+v", r.Method, r.Params)
	} else {
		p.answer(r.ID, true)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWireACanceledContextSendsCancelRequestWithTheCallsID(t *testing.T) {
	c, p := connected(t)
	ctx, cancel := context.WithCancel(testContext(t))
	done := async(func() error { _, err := c.SpawnStatus(ctx, "h-1", time.Minute); return err })
	r := p.read()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the call: %v", err)
	}
	if id := cancelled(t, p.read()); id != r.ID {
		t.Fatalf("$/cancelRequest of %d, the call was %d", id, r.ID)
	}
	// The daemon's -32800 for it goes nowhere; the connection carries on.
	p.fail(r.ID, spawnd.CodeRequestCancelled, "cancelled by $/cancelRequest", nil)
	ok := async(func() error { return c.Call(testContext(t), "ping", nil, nil) })
	p.answer(p.read().ID, true)
	if err := <-ok; err != nil {
		t.Fatal(err)
	}
}

func TestWireAWaitWhoseContextEndsLeavesAndTheLoopCancelsItsSpawnWait(t *testing.T) {
	c, p := connected(t)
	ctx, cancel := context.WithCancel(testContext(t))
	done := async(func() error { _, err := c.Wait(ctx, "h-1"); return err })
	r := untilOneSpawnWaitNames(t, p, []string{"h-1"})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the Wait: %v", err)
	}
	// Nobody waits any more: the loop gives up its spawn_wait at the daemon.
	if id := cancelled(t, p.read()); id != r.ID {
		t.Fatalf("$/cancelRequest of %d, the spawn_wait was %d", id, r.ID)
	}
}

func TestWireAHandleNotFoundFailsOnlyItsOwnWait(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	gone := async(func() error { _, err := c.Wait(ctx, "h-gone"); return err })
	live := async(func() error { _, err := c.Wait(ctx, "h-live"); return err })
	r := untilOneSpawnWaitNames(t, p, []string{"h-gone", "h-live"})
	p.fail(r.ID, spawnd.CodeNotFound, "no such handle on this connection", map[string]string{"handle": "h-gone"})
	err := <-gone
	var e *spawnd.Error
	if !errors.Is(err, spawnd.ErrNotFound) || !errors.As(err, &e) || e.NotFoundHandle() != "h-gone" {
		t.Fatalf("the Wait of the handle not found: %v", err)
	}
	// The loop goes on with the other handle alone.
	r = p.read()
	if r.Method != "spawn_wait" || fmt.Sprint(handlesOf(t, r)) != "[h-live]" {
		t.Fatalf("after the handle not found: %s %+v", r.Method, r.Params)
	}
	select {
	case err := <-live:
		t.Fatalf("the other Wait returned: %v", err)
	default:
	}
	p.answer(r.ID, map[string]interface{}{"handle": "h-live", "state": "signaled", "ended": []string{"h-live"}})
	st := p.read()
	if st.Method != "spawn_status" || st.Params["handle"] != "h-live" {
		t.Fatalf("after h-live ended: %s %+v", st.Method, st.Params)
	}
	p.answer(st.ID, map[string]interface{}{"state": "signaled", "signal": 9, "interrupted_by": "spawn_kill"})
	if err := <-live; err != nil {
		t.Fatal(err)
	}
}

func TestWireALostConnectionFailsEveryWait(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	first := async(func() error { _, err := c.Wait(ctx, "h-1"); return err })
	second := async(func() error { _, err := c.Wait(ctx, "h-2"); return err })
	untilOneSpawnWaitNames(t, p, []string{"h-1", "h-2"})
	_ = p.conn.Close()
	for _, done := range []<-chan error{first, second} {
		if err := <-done; !errors.Is(err, spawnd.ErrConnectionLost) {
			t.Fatalf("a Wait when the connection ended: %v", err)
		}
	}
}

func TestWireAnOverloadNamesTheLimitAndWhatTheCallerUses(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	done := async(func() error {
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: "local://x/y", Op: "run"})
		return err
	})
	p.fail(p.read().ID, spawnd.CodeOverloaded, "at the limit of 16 running spawns ([server] running_spawns_share)",
		map[string]interface{}{"limit": "server.running_spawns_share", "max": 16, "asked": 1, "caller_uses": 16, "all_use": 40})
	err := <-done
	var o *spawnd.Overload
	if !errors.Is(err, spawnd.ErrOverloaded) || !errors.As(err, &o) {
		t.Fatalf("spawn: %v", err)
	}
	want := spawnd.Overload{Limit: "server.running_spawns_share", Max: 16, Asked: 1, CallerUses: 16, AllUse: 40}
	if !bytes.Contains(o.Raw, []byte(`"all_use"`)) {
		t.Fatalf("overload raw %s", o.Raw)
	}
	o.Raw = nil
	if !reflect.DeepEqual(*o, want) {
		t.Fatalf("overload %+v, want %+v", *o, want)
	}
	done = async(func() error { _, err := c.SpawnStatus(ctx, "h", time.Second); return err })
	p.fail(p.read().ID, spawnd.CodeOverloaded, "this connection has 64 waiting requests in progress",
		map[string]interface{}{"limit": "waits_in_progress_per_connection", "max": 64, "caller_uses": 64})
	var e *spawnd.Error
	if err := <-done; !errors.As(err, &e) || e.Overload() == nil || e.Overload().Limit != "waits_in_progress_per_connection" ||
		e.Overload().CallerUses != 64 || e.Overload().Asked != 0 {
		t.Fatalf("status wait: %v", err)
	}
	done = async(func() error { return c.Call(ctx, "m", nil, nil) })
	p.fail(p.read().ID, spawnd.CodeOverloaded, "busy", nil)
	var none *spawnd.Overload
	if err := <-done; !errors.As(err, &e) || e.Overload() != nil || errors.As(err, &none) {
		t.Fatalf("an overload without data: %v", err)
	}
}

func TestWireAFifthProbeWaitsInTheClientForAPlace(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	var healths []<-chan error
	for i := 0; i < spawnd.MaxProbesInProgress+1; i++ {
		healths = append(healths, async(func() error { _, err := c.Health(ctx); return err }))
	}
	var probes []wireRequest
	for len(probes) < spawnd.MaxProbesInProgress {
		probes = append(probes, p.read())
	}
	// The fifth is held: the next line is a call of another class.
	ping := async(func() error { return c.Call(ctx, "ping", nil, nil) })
	if r := p.read(); r.Method != "ping" {
		t.Fatalf("with %d probes in progress: %s", len(probes), r.Method)
	} else {
		p.answer(r.ID, true)
	}
	if err := <-ping; err != nil {
		t.Fatal(err)
	}
	p.answer(probes[0].ID, map[string]int{"protocol_version": 1})
	if r := p.read(); r.Method != "health" {
		t.Fatalf("once a probe was answered: %s", r.Method)
	} else {
		probes = append(probes[1:], r)
	}
	for _, r := range probes {
		p.answer(r.ID, map[string]int{"protocol_version": 1})
	}
	for _, done := range healths {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
