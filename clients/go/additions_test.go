package spawnd_test

// The client against scripted peers, for what a runtime author's trial
// asked of it: one-line errors, the Exit sum type, typed states and
// result sections, notifications of a spawn made without them, the
// socket from $SPAWND_SOCKET, kill signals, ping and spawn_list, and
// dialing again after the daemon closed an idle connection.

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"spawnd.dev/go/spawnd"
)

// listening is a socket whose every accepted connection is a peer, in
// order of acceptance.
func listening(t *testing.T) (string, <-chan *peer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spawnd.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	peers := make(chan *peer, 8)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
			peers <- &peer{t: t, conn: conn, r: bufio.NewReaderSize(conn, 1<<20)}
		}
	}()
	return path, peers
}

func nextPeer(t *testing.T, peers <-chan *peer) *peer {
	t.Helper()
	select {
	case p := <-peers:
		return p
	case <-time.After(20 * time.Second):
		t.Fatal("no connection came")
		return nil
	}
}

func TestWireErrorsAreOneLineWithTheirDetailsInFields(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	denial := map[string]interface{}{
		"class": "capability_denied", "boundary": "connector_manifest", "boundary_detail": "connector_manifest",
		"reason": "arg_unknown", "connector": "local://x/y", "requested": "color", "granted": []string{"script"},
		"message":  "the operation sh has no param color\nhint: connectors_status lists its params",
		"audit_id": "a-1",
	}
	call := async(func() error { _, err := c.SpawnOp(ctx, sh("true")); return err })
	p.fail(p.read().ID, spawnd.CodeDenied, "capability denied:\nthe operation sh has no param color\n  hint: see connectors_status", denial)
	err := <-call
	if strings.ContainsAny(err.Error(), "\r\n") {
		t.Fatalf("Error() spans lines: %q", err.Error())
	}
	if !strings.Contains(err.Error(), "spawn_op") || !strings.Contains(err.Error(), "-32001, arg_unknown") {
		t.Fatalf("Error() = %q", err.Error())
	}
	var e *spawnd.Error
	var d *spawnd.Denial
	if !errors.As(err, &e) || e.Code != spawnd.CodeDenied || !strings.Contains(e.Message, "\n") ||
		!errors.As(err, &d) || d.Reason != "arg_unknown" || d.Requested != "color" ||
		!reflect.DeepEqual(d.Granted, []string{"script"}) || !strings.Contains(d.Message, "hint:") {
		t.Fatalf("the details: %+v %+v", e, d)
	}
	if strings.ContainsAny(d.Error(), "\r\n") {
		t.Fatalf("Denial.Error() spans lines: %q", d.Error())
	}
	lost := &spawnd.ConnectionError{Path: "/x", Err: errors.New("read:\nreset"), Lost: true,
		Last: &spawnd.Error{Code: -32600, Message: "idle\nclosing"}, Handles: []string{"h-1", "h-2"}}
	if strings.ContainsAny(lost.Error(), "\r\n") || !strings.Contains(lost.Error(), "h-1, h-2") {
		t.Fatalf("ConnectionError.Error() = %q", lost.Error())
	}
}

func TestWireExitIsAnExitCodeOrASignalAndNeverPanics(t *testing.T) {
	for _, tc := range []struct {
		wire                 string
		code                 int
		exited               bool
		signal               string
		signum               int
		signalled, ended, ok bool
		text                 string
	}{
		{`{"state":"exited","exit_code":3,"signal":null}`, 3, true, "", 0, false, true, false, "exit code 3"},
		{`{"state":"exited","exit_code":0}`, 0, true, "", 0, false, true, true, "exit code 0"},
		{`{"state":"signaled","exit_code":null,"signal":9,"signal_name":"SIGKILL"}`, 0, false, "SIGKILL", 9, true, true, false, "signal SIGKILL"},
		{`{"state":"running"}`, 0, false, "", 0, false, false, false, "no exit"},
		{`{"state":"failed","error":"the spawner died"}`, 0, false, "", 0, false, true, false, "no exit"},
	} {
		var st spawnd.Status
		if err := json.Unmarshal([]byte(tc.wire), &st); err != nil {
			t.Fatalf("%s: %v", tc.wire, err)
		}
		code, exited := st.Exit.Exited()
		signal, signalled := st.Exit.Signalled()
		signum, _ := st.Exit.SignalNumber()
		if code != tc.code || exited != tc.exited || signal != tc.signal || signalled != tc.signalled ||
			signum != tc.signum || st.Ended() != tc.ended || st.Success() != tc.ok || st.Exit.String() != tc.text {
			t.Fatalf("%s: exit %v (%d %v, %q %d %v), ended %v, success %v", tc.wire, st.Exit, code, exited,
				signal, signum, signalled, st.Ended(), st.Success())
		}
	}
	if spawnd.ExitCode(2) == spawnd.ExitSignal("SIGTERM", 15) || spawnd.ExitCode(0) == (spawnd.Exit{}) {
		t.Fatal("distinct exits compare equal")
	}
	var s spawnd.State = "paused"
	if !s.Ended() || spawnd.StateRunning.Ended() {
		t.Fatal("State.Ended")
	}
}

func TestWireTheStatusDecodesIsolationAndNetworkAsTypedSections(t *testing.T) {
	wire := `{"state":"exited","exit_code":0,
	  "isolation":{"namespaces":["user","mount","pid"],"root":"tmpfs","network_namespace":"new; relay",
	    "landlock":{"abi":6,"status":"fully_enforced","abstract_unix_and_signal_scoped":true,
	      "execute":{"policy":"declared","limited_to":"only these","count":1,
	        "files":[{"path":"/bin/sh","granted_as":"program","sha256":"sha256:00"}]}},
	    "seccomp":{"filter":"f1","instructions":120,"arch":"x86_64"},"no_new_privs":true,"capabilities":"none",
	    "uid":65534,"gid":65534,"limits_via":"cgroup",
	    "limits":{"max_stdout_bytes":1,"max_stderr_bytes":2,"wall_time_ms":3,"max_memory_bytes":4,
	      "max_processes":5,"max_file_size_bytes":6,"max_open_files":7,"tmp_size_bytes":null,"tmp_exec":false},
	    "missing_read_scopes":["/gone"],"created_write_scopes":[],"idmapped":[],"cwd":"/work","fresh_cwd":true,
	    "tmpfs":{"tmp_bytes":8,"tmp_exec":false,"dev_shm_bytes":9}},
	  "network":{"connections":1,"refused":1,"bytes_up":10,"bytes_down":20,
	    "listed":[{"protocol":"tcp","host":"example.org","port":443,"dialed":"192.0.2.1:443","allowed":true,
	      "connected":true,"reason":null,"denial":null,"sni":"example.org","error":null,"bytes_up":10,
	      "bytes_down":20,"duration_ms":5}],
	    "unlisted":0,"refusals":[{"host":"10.0.0.1","port":22,"protocol":"tcp","reason":"not_granted","count":2}],
	    "refusals_unreported":0,"connections_unreported":[],"dns_refused":[{"name":"evil.test","type":"A"}],
	    "dns_refused_more":0,"learning":"record","contacted":["example.org:443"],"contacted_unlisted":0}}`
	var st spawnd.Status
	if err := json.Unmarshal([]byte(wire), &st); err != nil {
		t.Fatal(err)
	}
	iso, net := st.Isolation, st.Network
	if iso == nil || iso.Landlock == nil || iso.Landlock.Execute.Policy != "declared" ||
		iso.Landlock.Execute.Files[0].GrantedAs != "program" || iso.Seccomp.Instructions != 120 ||
		iso.Limits.MaxOpenFiles != 7 || iso.Limits.TmpSizeBytes != nil || iso.Tmpfs.DevShmBytes != 9 ||
		iso.UID != 65534 || !iso.FreshCwd || iso.MissingReadScopes[0] != "/gone" {
		t.Fatalf("isolation %+v", iso)
	}
	if net == nil || net.Connections != 1 || net.Listed[0].Dialed == nil || *net.Listed[0].Dialed != "192.0.2.1:443" ||
		net.Listed[0].Reason != nil || net.Refusals[0].Reason != "not_granted" || net.Refusals[0].Count != 2 ||
		net.DNSRefused[0].Name != "evil.test" || net.Learning != "record" || net.Contacted[0] != "example.org:443" {
		t.Fatalf("network %+v", net)
	}
	var bare spawnd.Status
	if err := json.Unmarshal([]byte(`{"state":"running"}`), &bare); err != nil || bare.Isolation != nil || bare.Network != nil {
		t.Fatalf("a running status: %+v %v", bare, err)
	}
}

func TestWireNotificationsOfASpawnMadeWithoutThemCloseAtOnce(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	spawned := async(func() error { _, err := c.SpawnOp(ctx, sh("true")); return err })
	p.answer(p.read().ID, map[string]string{"handle": "h-quiet"})
	if err := <-spawned; err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h-quiet", "h-never-spawned"} {
		select {
		case n, open := <-c.Notifications(h):
			if open {
				t.Fatalf("%s: a notification %+v", h, n)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the notifications of %s did not close", h)
		}
	}
}

func TestWireDialWithoutAPathUsesSPAWND_SOCKET(t *testing.T) {
	path, peers := listening(t)
	t.Setenv("SPAWND_SOCKET", path)
	c, err := spawnd.Dial(testContext(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Path() != path {
		t.Fatalf("dialed %s, want %s", c.Path(), path)
	}
	nextPeer(t, peers)
	t.Setenv("SPAWND_SOCKET", "")
	if got := spawnd.SocketPath(""); got != spawnd.DefaultSocket {
		t.Fatalf("without SPAWND_SOCKET: %s", got)
	}
	if got := spawnd.SocketPath("/given"); got != "/given" {
		t.Fatalf("a path given: %s", got)
	}
}

func TestWireKillSendsTheSignalAskedFor(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	for _, sig := range []spawnd.Signal{spawnd.SIGTERM, spawnd.SIGINT, spawnd.SIGHUP, spawnd.SIGQUIT,
		spawnd.SIGUSR1, spawnd.SIGUSR2, spawnd.SIGKILL, ""} {
		done := async(func() error { return c.SpawnKill(ctx, "h-1", sig) })
		r := p.read()
		got, has := r.Params["signal"]
		if r.Method != "spawn_kill" || r.Params["handle"] != "h-1" || (sig == "" && has) || (sig != "" && got != string(sig)) {
			t.Fatalf("kill %q sent %+v", sig, r)
		}
		p.answer(r.ID, map[string]interface{}{})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	done := async(func() error { return c.SpawnKill(ctx, "h-1", "SIGSTOP") })
	p.fail(p.read().ID, spawnd.CodeInvalidParams, "invalid params: signal: SIGSTOP is not one of SIGTERM, …", nil)
	if err := <-done; !errors.Is(err, spawnd.ErrInvalidParams) {
		t.Fatalf("an unknown signal: %v", err)
	}
}

func TestWirePingAndSpawnListAreTyped(t *testing.T) {
	c, p := connected(t)
	ctx := testContext(t)
	var pong *spawnd.Pong
	done := async(func() (err error) { pong, err = c.Ping(ctx); return err })
	r := p.read()
	if r.Method != "ping" || len(r.Params) != 0 {
		t.Fatalf("ping sent %+v", r)
	}
	p.answer(r.ID, map[string]string{"version": "0.9.1"})
	if err := <-done; err != nil || pong.Version != "0.9.1" {
		t.Fatalf("ping: %+v %v", pong, err)
	}
	var list *spawnd.SpawnList
	done = async(func() (err error) { list, err = c.SpawnList(ctx); return err })
	r = p.read()
	if r.Method != "spawn_list" || len(r.Params) != 0 {
		t.Fatalf("spawn_list sent %+v", r)
	}
	p.send(json.RawMessage(`{"jsonrpc":"2.0","id":` + jsonID(r.ID) + `,"result":{"spawns":[
	  {"handle":"h-1","state":"running","label":"build","connector":"local://x/y","op":"run","detached":false,
	   "attached":true,"lease_ms_left":null,"token":null},
	  {"handle":"h-2","state":"exited","label":null,"connector":"local://x/y","op":null,"detached":true,
	   "attached":false,"lease_ms_left":41000,"token":"tok"}]}}`))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(list.Spawns) != 2 {
		t.Fatalf("spawns %+v", list.Spawns)
	}
	a, b := list.Spawns[0], list.Spawns[1]
	if a.Handle != "h-1" || a.State != spawnd.StateRunning || a.Label == nil || *a.Label != "build" || a.Op == nil ||
		!a.Attached || a.Detached || a.LeaseMSLeft != nil || a.Token != nil {
		t.Fatalf("first %+v", a)
	}
	if b.State != spawnd.StateExited || b.Label != nil || b.Op != nil || !b.Detached || b.Attached ||
		b.LeaseMSLeft == nil || *b.LeaseMSLeft != 41000 || b.Token == nil || *b.Token != "tok" {
		t.Fatalf("second %+v", b)
	}
}

func jsonID(id uint64) string {
	b, _ := json.Marshal(id)
	return string(b)
}

func TestWireAConnectionTheDaemonClosedWithoutHandlesIsDialedAgain(t *testing.T) {
	path, peers := listening(t)
	ctx := testContext(t)
	c, err := spawnd.Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := nextPeer(t, peers)
	// The daemon's idle timeout: an error with id null, then the close.
	first.fail(nil, spawnd.CodeInvalidRequest, "idle for 120000 ms with no handle ([server] idle_timeout_ms); closing", nil)
	_ = first.conn.Close()
	<-c.Done()
	var pong *spawnd.Pong
	done := async(func() (err error) { pong, err = c.Ping(ctx); return err })
	second := nextPeer(t, peers)
	r := second.read()
	if r.Method != "ping" {
		t.Fatalf("on the new connection: %+v", r)
	}
	second.answer(r.ID, map[string]string{"version": "1"})
	if err := <-done; err != nil || pong.Version != "1" || c.Err() != nil {
		t.Fatalf("ping after the daemon closed: %+v %v (client %v)", pong, err, c.Err())
	}
	// Now it holds a handle: a loss is final, and says so.
	spawned := async(func() error { _, err := c.SpawnOp(ctx, sh("sleep 60")); return err })
	second.answer(second.read().ID, map[string]string{"handle": "h-held"})
	if err := <-spawned; err != nil {
		t.Fatal(err)
	}
	if got := c.Handles(); !reflect.DeepEqual(got, []string{"h-held"}) {
		t.Fatalf("handles held: %v", got)
	}
	_ = second.conn.Close()
	<-c.Done()
	_, err = c.Ping(ctx)
	var ce *spawnd.ConnectionError
	if !errors.As(err, &ce) || !ce.Lost || !reflect.DeepEqual(ce.Handles, []string{"h-held"}) ||
		!strings.Contains(err.Error(), "lost") || !strings.Contains(err.Error(), "h-held") {
		t.Fatalf("a call after losing a handle: %v", err)
	}
	select {
	case p := <-peers:
		t.Fatalf("dialed again while holding a handle (%v)", p.conn.LocalAddr())
	case <-time.After(200 * time.Millisecond):
	}
}

func TestWireAReleasedHandleIsNotHeldAndAClosedClientIsNotDialedAgain(t *testing.T) {
	path, peers := listening(t)
	ctx := testContext(t)
	c, err := spawnd.Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	p := nextPeer(t, peers)
	spawned := async(func() error { _, err := c.SpawnOp(ctx, sh("true")); return err })
	p.answer(p.read().ID, map[string]string{"handle": "h-1"})
	if err := <-spawned; err != nil {
		t.Fatal(err)
	}
	released := async(func() error { return c.SpawnRelease(ctx, "h-1") })
	p.answer(p.read().ID, map[string]interface{}{})
	if err := <-released; err != nil || len(c.Handles()) != 0 {
		t.Fatalf("release: %v, held %v", err, c.Handles())
	}
	go func() { _, _ = p.r.ReadBytes(0); _ = p.conn.Close() }()
	_ = c.Close()
	if _, err := c.Ping(ctx); !errors.Is(err, spawnd.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	select {
	case <-peers:
		t.Fatal("dialed again after Close")
	case <-time.After(200 * time.Millisecond):
	}
}

func TestWireCallsAfterCloseOfALostConnectionAreErrClosed(t *testing.T) {
	path, peers := listening(t)
	ctx := testContext(t)
	c, err := spawnd.Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	p := nextPeer(t, peers)
	_ = p.conn.Close()
	<-c.Done()
	_ = c.Close()
	if _, err := c.Ping(ctx); !errors.Is(err, spawnd.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	select {
	case <-peers:
		t.Fatal("dialed again after Close")
	case <-time.After(200 * time.Millisecond):
	}
}
