package spawnd_test

// Every method against a real daemon (SPAWND_SOCKET) and its test
// connector (SPAWND_CONNECTOR, whose `sh` runs its `script` with bash).
// No test bounds a duration tighter than the generous test context: order
// is checked, not speed.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"spawnd.dev/go/spawnd"
)

func TestDaemonHealthSaysProtocolVersion1(t *testing.T) {
	c := dial(t)
	h, err := c.Health(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if h.ProtocolVersion != 1 || h.Status == "" || len(h.Raw) == 0 {
		t.Fatalf("health: %+v", h)
	}
}

func TestDaemonConnectorsStatusListsTheShOperationAndItsParam(t *testing.T) {
	c := dial(t)
	s, err := c.ConnectorsStatus(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	conn := s.Connectors[connector]
	if conn == nil || s.CapturedAt == "" || !strings.Contains(s.Block, "<connector_status") {
		t.Fatalf("connectors_status: %s", s.Raw)
	}
	for _, op := range conn.Operations {
		if op.Name == "sh" {
			if len(op.Params) != 1 || op.Params[0].Name != "script" || !op.Params[0].Required || op.Params[0].Kind != "string" {
				t.Fatalf("sh params: %+v", op.Params[0])
			}
			return
		}
	}
	t.Fatalf("no operation sh in %s", s.Raw)
}

func TestDaemonSpawnOpRunsAndEveryReadMethodSeesItsOutput(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	s, err := c.SpawnOp(ctx, sh("printf 'a%.0s' $(seq 1000); echo tail >&2"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.SpawnStatus(ctx, s.Handle, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Success() || st.Stdout.String() != strings.Repeat("a", 1000) || st.Stderr.String() != "tail\n" ||
		st.AuditID == "" || !strings.HasPrefix(st.Stdout.SHA256, "sha256:") {
		t.Fatalf("status: %s", st.Raw)
	}
	size, err := c.SpawnOutputSize(ctx, s.Handle, spawnd.Stdout)
	if err != nil || size.Bytes != 1000 || size.Truncated {
		t.Fatalf("output size: %+v %v", size, err)
	}
	var got []byte
	for offset := int64(0); ; {
		chunk, err := c.SpawnOutputRead(ctx, s.Handle, spawnd.Stdout, offset, 300, 0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, chunk.Data...)
		offset += chunk.Skipped + int64(len(chunk.Data))
		if chunk.EOF {
			break
		}
	}
	if string(got) != strings.Repeat("a", 1000) {
		t.Fatalf("read %d bytes: %q…", len(got), got[:10])
	}
	stderr, skipped, err := c.ReadOutput(ctx, s.Handle, spawnd.Stderr)
	if err != nil || string(stderr) != "tail\n" || skipped != 0 {
		t.Fatalf("stderr %q, skipped %d: %v", stderr, skipped, err)
	}
	if err := c.SpawnRelease(ctx, s.Handle); err != nil {
		t.Fatal(err)
	}
}

func TestDaemonSpawnRunsARawEnvelopeWithStdin(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	s, err := c.Spawn(ctx, spawnd.SpawnParams{Connector: connector, Envelope: spawnd.Envelope{
		Program: "/usr/bin/bash", Argv: []string{"bash", "-c", "cat"}, Stdin: []byte("from go\n")}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, s.Handle)
	if err != nil || st.Stdout.String() != "from go\n" {
		t.Fatalf("status %+v: %v", st, err)
	}
}

func TestDaemonSpawnCheckDecidesWithoutRunning(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	plan, err := c.SpawnCheck(ctx, sh("echo checked"))
	if err != nil {
		t.Fatal(err)
	}
	if plan.Decision != "allowed" || len(plan.Argv) != 3 || plan.Argv[2] != "echo checked" {
		t.Fatalf("plan: %s", plan.Raw)
	}
	plan, err = c.SpawnCheck(ctx, spawnd.SpawnParams{Connector: connector,
		Envelope: spawnd.Envelope{Program: "/usr/bin/bash", Argv: []string{"bash", "-c", "true"}}})
	if err != nil || plan.Decision != "allowed" {
		t.Fatalf("envelope plan %+v: %v", plan, err)
	}
	_, err = c.SpawnCheck(ctx, spawnd.SpawnOpParams{Connector: connector, Op: "sh", Args: map[string]string{"script": "x", "extra": "y"}})
	var d *spawnd.Denial
	if !errors.Is(err, spawnd.ErrDenied) || !errors.As(err, &d) || d.Reason != "arg_unknown" || d.AuditID != "" {
		t.Fatalf("check of an unknown arg: %v %+v", err, d)
	}
}

func TestDaemonKillEndsTheProgramAndReleaseFreesTheHandle(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	s, err := c.SpawnOp(ctx, sh("sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SpawnKill(ctx, s.Handle, ""); err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, s.Handle)
	if err != nil || st.State != spawnd.StateSignaled || !killedBy(st, "SIGKILL", 9) || st.InterruptedBy != "spawn_kill" {
		t.Fatalf("killed: %+v: %v", st, err)
	}
	if err := c.SpawnRelease(ctx, s.Handle); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SpawnStatus(ctx, s.Handle, 0); !errors.Is(err, spawnd.ErrNotFound) {
		t.Fatalf("status of a released handle: %v", err)
	}
}

func TestDaemonErrorsAreTyped(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	t.Run("a denial", func(t *testing.T) {
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: connector, Op: "sh",
			Args: map[string]string{"script": "true", "nope": "x"}})
		var d *spawnd.Denial
		if !errors.Is(err, spawnd.ErrDenied) || !errors.As(err, &d) || d.Reason != "arg_unknown" ||
			d.AuditID == "" || d.Connector != connector || d.Message == "" {
			t.Fatalf("%v %+v", err, d)
		}
	})
	t.Run("an unknown operation", func(t *testing.T) {
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: connector, Op: "no-such-op"})
		var d *spawnd.Denial
		if !errors.As(err, &d) || d.Reason != "op_unknown" {
			t.Fatalf("%v %+v", err, d)
		}
	})
	t.Run("a handle not found", func(t *testing.T) {
		_, err := c.SpawnStatus(ctx, "h-0000", 0)
		if !errors.Is(err, spawnd.ErrNotFound) {
			t.Fatal(err)
		}
	})
	t.Run("an unknown method", func(t *testing.T) {
		err := c.Call(ctx, "no_such_method", nil, nil)
		if !errors.Is(err, spawnd.ErrUnknownMethod) {
			t.Fatal(err)
		}
	})
	t.Run("invalid params", func(t *testing.T) {
		s, err := c.SpawnOp(ctx, sh("true"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.SpawnOutputSize(ctx, s.Handle, spawnd.Stream(7))
		if !errors.Is(err, spawnd.ErrInvalidParams) {
			t.Fatal(err)
		}
	})
	t.Run("an invalid connector name", func(t *testing.T) {
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: "not a name", Op: "sh"})
		var n *spawnd.InvalidName
		if !errors.Is(err, spawnd.ErrInvalidParams) || !errors.As(err, &n) || n.Field != "connector" || n.Bytes != len("not a name") {
			t.Fatalf("%v %+v", err, n)
		}
	})
	t.Run("an oversized frame leaves the connection open", func(t *testing.T) {
		pad := strings.Repeat("x", 2<<20)
		_, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: connector, Op: "sh", Stdin: []byte(pad),
			Args: map[string]string{"script": "true"}})
		var e *spawnd.Error
		if !errors.Is(err, spawnd.ErrFrameTooLarge) || !errors.As(err, &e) {
			t.Fatalf("%v", err)
		}
		if n, _ := e.MaxFrameBytes(); n <= 0 || n >= 2<<20 {
			t.Fatalf("max_frame_bytes %d", n)
		}
		if _, err := c.Health(ctx); err != nil {
			t.Fatalf("health after the oversized frame: %v", err)
		}
	})
}

func TestDaemonALongStatusWaitDoesNotDelayAnotherAnswer(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	s, err := c.SpawnOp(ctx, sh("sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := c.SpawnStatus(ctx, s.Handle, 30*time.Second)
		waited <- err
	}()
	// The wait is on the wire before the next call (its id is lower);
	// the daemon reads requests in order.
	time.Sleep(200 * time.Millisecond)
	if _, err := c.SpawnOutputSize(ctx, s.Handle, spawnd.Stdout); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		t.Fatalf("the 30 s wait was answered before the calls after it: %v", err)
	default:
	}
	if err := c.SpawnKill(ctx, s.Handle, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

func TestDaemonManyGoroutinesShareOneConnection(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	// A connection takes 4 probes (health, connectors_status, spawn_check)
	// in progress at a time and refuses a fifth with -32003
	// (probes_in_progress_per_connection): the goroutines keep within it.
	probes := make(chan struct{}, 4)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st, err := c.Run(ctx, sh(fmt.Sprintf("echo %d", i)))
			if err != nil {
				errs <- err
			} else if st.Stdout.String() != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("run %d printed %q", i, st.Stdout.String())
			}
			probes <- struct{}{}
			_, err = c.Health(ctx)
			<-probes
			if err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDaemonSpawnWaitAnswersTheFirstToEnd(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	slow, err := c.SpawnOp(ctx, sh("sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	fast, err := c.SpawnOp(ctx, sh("exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.SpawnWait(ctx, []string{slow.Handle, fast.Handle}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w.Handle != fast.Handle || w.State != spawnd.StateExited || !w.Ended.Contains(fast.Handle) || w.Ended.Contains(slow.Handle) {
		t.Fatalf("spawn_wait: %s", w.Raw)
	}
	if err := c.SpawnRelease(ctx, slow.Handle); err != nil {
		t.Fatal(err)
	}
	w, err = c.SpawnWait(ctx, []string{fast.Handle}, 0)
	if err != nil || w.Handle != fast.Handle {
		t.Fatalf("spawn_wait of an ended one: %+v %v", w, err)
	}
	none, err := c.SpawnOp(ctx, sh("sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	w, err = c.SpawnWait(ctx, []string{none.Handle}, 100*time.Millisecond)
	if err != nil || w.Handle != "" || w.State != spawnd.StateRunning || len(w.Ended) != 0 {
		t.Fatalf("spawn_wait with none ended: %+v %v", w, err)
	}
}

func TestDaemonNotificationsStreamOutputAndTheExit(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	p := sh("for i in 1 2 3; do echo line $i; sleep 0.1; done; echo bye >&2")
	p.Notify = true
	s, err := c.SpawnOp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var out [2]bytes.Buffer
	var next [2]int64
	var exited *spawnd.Status
	ch := c.Notifications(s.Handle)
	for {
		var n spawnd.Notification
		var open bool
		select {
		case n, open = <-ch:
		case <-ctx.Done():
			t.Fatalf("no spawn_exited notification: %v", ctx.Err())
		}
		if !open {
			break
		}
		switch n.Method {
		case spawnd.MethodSpawnOutput:
			if n.Offset != next[n.Which] || n.Skipped != 0 {
				t.Fatalf("output at %d (skipped %d), want %d", n.Offset, n.Skipped, next[n.Which])
			}
			out[n.Which].Write(n.Data)
			next[n.Which] += int64(len(n.Data))
		case spawnd.MethodSpawnExited:
			exited = n.Status
		}
	}
	if exited == nil || !exited.Success() || exited.Stdout == nil || exited.Stdout.Bytes != int64(out[0].Len()) {
		t.Fatalf("exited: %+v", exited)
	}
	if out[0].String() != "line 1\nline 2\nline 3\n" || out[1].String() != "bye\n" {
		t.Fatalf("stdout %q stderr %q", out[0].String(), out[1].String())
	}
}

func TestDaemonStdinStreamsTwoMegabytes(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	p := sh("sha256sum | cut -d' ' -f1")
	p.StdinStream = true
	s, err := c.SpawnOp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 2<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	w := c.NewStdinWriter(ctx, s.Handle)
	n, err := io.Copy(w, bytes.NewReader(data))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("wrote %d: %v", n, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, s.Handle)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if !st.Success() || st.Stdout.String() != hex.EncodeToString(sum[:])+"\n" {
		t.Fatalf("status %s", st.Raw)
	}
	if _, err := c.SpawnStdinWrite(ctx, s.Handle, []byte("late")); !errors.Is(err, spawnd.ErrNotFound) {
		t.Fatalf("a write after the close: %v", err)
	}
}

func TestDaemonADetachedSpawnIsAttachedFromANewConnection(t *testing.T) {
	first := dial(t)
	ctx := testContext(t)
	p := sh("sleep 1; echo still here")
	p.Lease = time.Minute
	s, err := first.SpawnOp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Token == "" {
		t.Fatalf("no token: %s", s.Raw)
	}
	_ = first.Close()
	second := dial(t)
	if _, err := second.SpawnAttach(ctx, s.Handle, "not-the-token"); !errors.Is(err, spawnd.ErrNotFound) {
		t.Fatalf("attach with a wrong token: %v", err)
	}
	a, err := second.SpawnAttach(ctx, s.Handle, s.Token)
	if err != nil {
		t.Fatal(err)
	}
	if a.Handle != s.Handle || a.State == "" {
		t.Fatalf("attached: %s", a.Raw)
	}
	st, err := second.Wait(ctx, s.Handle)
	if err != nil || !st.Success() || st.Stdout.String() != "still here\n" || st.InterruptedBy != "" {
		t.Fatalf("after the attach: %+v %v", st, err)
	}
}

func TestDaemonWithoutALeaseClosingKillsTheProgram(t *testing.T) {
	first := dial(t)
	ctx := testContext(t)
	s, err := first.SpawnOp(ctx, sh("sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Close()
	second := dial(t)
	if _, err := second.SpawnStatus(ctx, s.Handle, 0); !errors.Is(err, spawnd.ErrNotFound) {
		t.Fatalf("another connection's handle: %v", err)
	}
}

func TestDaemonAnOutputReaderFollowsALiveStream(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	s, err := c.SpawnOp(ctx, sh("for i in $(seq 5); do echo $i; sleep 0.1; done"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r := c.NewOutputReader(ctx, s.Handle, spawnd.Stdout)
	if _, err := io.Copy(&out, r); err != nil {
		t.Fatal(err)
	}
	if out.String() != "1\n2\n3\n4\n5\n" || r.Skipped() != 0 || r.Offset() != 10 {
		t.Fatalf("read %q, skipped %d, offset %d", out.String(), r.Skipped(), r.Offset())
	}
}

func TestDaemonACanceledContextEndsOnlyItsCall(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	s, err := c.SpawnOp(ctx, sh("sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(short, s.Handle); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait under a short deadline: %v", err)
	}
	st, err := c.SpawnStatus(ctx, s.Handle, 0)
	if err != nil || st.State != spawnd.StateRunning {
		t.Fatalf("status after: %+v %v", st, err)
	}
	if err := c.SpawnRelease(ctx, s.Handle); err != nil {
		t.Fatal(err)
	}
}

func TestDaemonAnAttachedSpawnsNotificationsComeToItsNewConnection(t *testing.T) {
	first := dial(t)
	ctx := testContext(t)
	p := sh("read line; echo got $line")
	p.Notify, p.Lease, p.StdinStream = true, time.Minute, true
	s, err := first.SpawnOp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Close()
	second := dial(t)
	if _, err := second.SpawnAttach(ctx, s.Handle, s.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := second.SpawnStdinWrite(ctx, s.Handle, []byte("it\n")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ch := second.Notifications(s.Handle)
	for {
		select {
		case n, open := <-ch:
			if !open {
				t.Fatalf("no spawn_exited; stdout %q", out.String())
			}
			if n.Method == spawnd.MethodSpawnOutput && n.Which == spawnd.Stdout {
				out.Write(n.Data)
			}
			if n.Method == spawnd.MethodSpawnExited {
				if !n.Status.Success() || out.String() != "got it\n" {
					t.Fatalf("exited %+v after %q", n.Status, out.String())
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("no spawn_exited on the attaching connection; stdout %q", out.String())
		}
	}
}

func TestDaemonAFifthWaitingStdinWriteIsOverloaded(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	p := sh("sleep 60")
	p.StdinStream = true
	s, err := c.SpawnOp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	// The program reads nothing: past the pipe's buffer every write waits.
	chunk := bytes.Repeat([]byte("x"), 256<<10)
	results := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			_, err := c.SpawnStdinWrite(ctx, s.Handle, chunk)
			results <- err
		}()
	}
	// At most 4 wait per handle and one is being written: at least 3
	// of the 8 are refused, the rest wait for a reader that never comes.
	for overloaded := 0; overloaded < 3; {
		select {
		case err := <-results:
			if !errors.Is(err, spawnd.ErrOverloaded) {
				t.Fatalf("a write that cannot wait: %v", err)
			}
			overloaded++
		case <-ctx.Done():
			t.Fatalf("only %d of 8 waiting writes were -32003", overloaded)
		}
	}
	if err := c.SpawnRelease(ctx, s.Handle); err != nil {
		t.Fatal(err)
	}
}

// holdConnectionsUntilRefused opens raw connections, each asking health and
// reading its answer, until the daemon refuses one for the uid's limit
// ([server] max_connections_per_uid); the served ones stay open until the
// test ends.
func holdConnectionsUntilRefused(t *testing.T) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		conn, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		// The refused one may be closed before the request is written.
		_, _ = conn.Write([]byte(`{"jsonrpc": "2.0", "id": 1, "method": "health"}` + "\n"))
		line, err := bufio.NewReader(conn).ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var answer struct {
			ID json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(line, &answer); err != nil {
			t.Fatal(err)
		}
		if string(answer.ID) == "null" {
			return
		}
	}
	t.Fatal("no connection was refused")
}

// waitUntilAConnectionIsServed waits, once connections are closed, until
// the daemon has freed their places: a later test must not be refused.
func waitUntilAConnectionIsServed(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := spawnd.Dial(ctx, socket)
		if err == nil {
			_, err = c.Health(ctx)
			_ = c.Close()
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("no connection served after the held ones closed: %v", err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDaemonAConnectionOverTheUidLimitIsLostWithWhatTheDaemonSaid(t *testing.T) {
	if socket == "" {
		t.Skip("no daemon (SPAWND_SKIP_DAEMON_TESTS=1)")
	}
	// Cleanups run last first: this one once the held connections are closed.
	t.Cleanup(func() { waitUntilAConnectionIsServed(t) })
	holdConnectionsUntilRefused(t)
	ctx := testContext(t)
	c, err := spawnd.Dial(ctx, socket)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
		_, err = c.Health(ctx)
	}
	var ce *spawnd.ConnectionError
	if !errors.Is(err, spawnd.ErrConnectionLost) || !errors.As(err, &ce) || ce.Last == nil ||
		ce.Last.Code != spawnd.CodeOverloaded || !strings.Contains(err.Error(), "connections open") {
		t.Fatalf("over the uid's limit: %v", err)
	}
}

// spawnRetrying spawns, trying again while the daemon is at its limit of
// running spawns: the programs of earlier tests' connections end as the
// daemon notices those connections closed.
func spawnRetrying(ctx context.Context, t *testing.T, c *spawnd.Client, p spawnd.SpawnOpParams) *spawnd.Spawned {
	t.Helper()
	for {
		s, err := c.SpawnOp(ctx, p)
		if err == nil {
			return s
		}
		if !errors.Is(err, spawnd.ErrOverloaded) || ctx.Err() != nil {
			t.Fatalf("spawn: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDaemonSixtyFourWaitsHoldUpNeitherAKillNorHealthNorAnotherWait(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	handles := make([]string, spawnd.MaxWaitHandles)
	for i := range handles {
		handles[i] = spawnRetrying(ctx, t, c, sh(fmt.Sprintf("echo %d; exec sleep 300", i))).Handle
	}
	type waited struct {
		i   int
		st  *spawnd.Status
		err error
	}
	results := make(chan waited, len(handles))
	for i, h := range handles {
		go func(i int, h string) {
			st, err := c.Wait(ctx, h)
			results <- waited{i, st, err}
		}(i, h)
	}
	// Time for the Waits to join; nothing below depends on how many have.
	time.Sleep(300 * time.Millisecond)
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("health with 64 Waits in progress: %v", err)
	}
	// The Waits hold one of the connection's 64 waits, not 64 of them.
	if _, err := c.SpawnStatus(ctx, handles[0], time.Millisecond); err != nil {
		t.Fatalf("a status wait with 64 Waits in progress: %v", err)
	}
	for _, h := range handles {
		if err := c.SpawnKill(ctx, h, ""); err != nil {
			t.Fatalf("kill %s with Waits in progress: %v", h, err)
		}
	}
	for range handles {
		r := <-results
		if r.err != nil {
			t.Fatalf("Wait %d: %v", r.i, r.err)
		}
		st := r.st
		if st.State != spawnd.StateSignaled || !killedBy(st, "SIGKILL", 9) || st.InterruptedBy != "spawn_kill" ||
			st.Stdout.String() != fmt.Sprintf("%d\n", r.i) {
			t.Fatalf("Wait %d: %+v (stdout %+v)", r.i, st, st.Stdout)
		}
	}
}

func TestDaemonCancelledWaitsFreeTheirPlacesAndAnOverloadNamesTheBound(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	s := spawnRetrying(ctx, t, c, sh("exec sleep 300"))
	defer func() { _ = c.SpawnRelease(ctx, s.Handle) }()
	waits, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A place a short wait below held a moment is asked again.
			for {
				_, err := c.SpawnStatus(waits, s.Handle, time.Minute)
				if !errors.Is(err, spawnd.ErrOverloaded) {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	// Short waits, one at a time, until the 64 long ones fill the bound.
	var e *spawnd.Error
	for {
		time.Sleep(100 * time.Millisecond)
		_, err := c.SpawnStatus(ctx, s.Handle, time.Millisecond)
		if errors.As(err, &e) && e.Code == spawnd.CodeOverloaded {
			break
		}
		if err != nil {
			t.Fatalf("a short wait: %v", err)
		}
	}
	o := e.Overload()
	if o == nil || o.Limit != "waits_in_progress_per_connection" || o.Max != 64 || o.CallerUses != 64 {
		t.Fatalf("the refused wait: %v (data %s)", e, e.Data)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("health with every wait place taken: %v", err)
	}
	// The callers give up: each call sends $/cancelRequest, and the daemon
	// frees their places long before their minute is up.
	cancel()
	wg.Wait()
	freed, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	for {
		_, err := c.SpawnStatus(freed, s.Handle, time.Millisecond)
		if err == nil {
			return
		}
		if !errors.Is(err, spawnd.ErrOverloaded) || freed.Err() != nil {
			t.Fatalf("a wait after the others were cancelled: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killedBy says whether the status is of a program killed by the signal
// name, number signum.
func killedBy(st *spawnd.Status, name string, signum int) bool {
	got, signalled := st.Exit.Signalled()
	n, _ := st.Exit.SignalNumber()
	_, exited := st.Exit.Exited()
	return signalled && !exited && got == name && n == signum
}

// protocolAdditions checks the daemon answers ping before a test of
// ping, spawn_list and spawn_kill's signal goes on.
func protocolAdditions(t *testing.T, c *spawnd.Client) {
	t.Helper()
	if _, err := c.Ping(testContext(t)); err != nil {
		t.Fatal(err)
	}
}

func TestDaemonPingListAndASignalTheProgramHandles(t *testing.T) {
	c := dial(t)
	ctx := testContext(t)
	protocolAdditions(t, c)
	pong, err := c.Ping(ctx)
	if err != nil || pong.Version == "" {
		t.Fatalf("ping: %+v %v", pong, err)
	}
	s, err := c.SpawnOp(ctx, spawnd.SpawnOpParams{Connector: connector, Op: "sh", Label: "trapper",
		Args: map[string]string{"script": "trap 'echo term; exit 3' TERM; echo ready; while :; do sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.SpawnList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mine *spawnd.SpawnListEntry
	for i := range list.Spawns {
		if list.Spawns[i].Handle == s.Handle {
			mine = &list.Spawns[i]
		}
	}
	if mine == nil || mine.State != spawnd.StateRunning || !mine.Attached || mine.Detached || mine.Label == nil ||
		*mine.Label != "trapper" || mine.Op == nil || *mine.Op != "sh" || mine.Token != nil {
		t.Fatalf("spawn_list: %+v", list.Spawns)
	}
	// The trap is set once the script says so.
	r := c.NewOutputReader(ctx, s.Handle, spawnd.Stdout)
	ready := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(r, ready); err != nil {
		t.Fatal(err)
	}
	if err := c.SpawnKill(ctx, s.Handle, "SIGSTOP"); !errors.Is(err, spawnd.ErrInvalidParams) {
		t.Fatalf("a signal spawn_kill does not take: %v", err)
	}
	if err := c.SpawnKill(ctx, s.Handle, spawnd.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, s.Handle)
	if err != nil {
		t.Fatal(err)
	}
	if code, exited := st.Exit.Exited(); !exited || code != 3 || st.Stdout.String() != "ready\nterm\n" {
		t.Fatalf("after SIGTERM: %v, stdout %q", st.Exit, st.Stdout)
	}
}

func TestDaemonAConnectionClosedIdleIsDialedAgain(t *testing.T) {
	idle := os.Getenv("SPAWND_IDLE_SOCKET")
	if idle == "" {
		t.Skip("no SPAWND_IDLE_SOCKET (a daemon with a short idle_timeout_ms; integration/clients.rs starts one)")
	}
	ctx := testContext(t)
	c, err := spawnd.Dial(ctx, idle)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the daemon did not close the idle connection")
	}
	var ce *spawnd.ConnectionError
	if err := c.Err(); !errors.As(err, &ce) || ce.Last == nil || len(ce.Handles) != 0 {
		t.Fatalf("the idle connection ended with %v", err)
	}
	if _, err := c.Health(ctx); err != nil || c.Err() != nil {
		t.Fatalf("a call after the idle close: %v (client %v)", err, c.Err())
	}
}
