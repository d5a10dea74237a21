package spawnd

// This file owns the connection: dialing, writing request lines, the one
// reader goroutine that matches answers to calls by id and routes
// notifications, telling the daemon ($/cancelRequest) of a call whose
// caller gave up, how the connection ends, and dialing again after the
// daemon closed one that held no handles.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSocket is where a packaged daemon listens (systemd's socket unit).
const DefaultSocket = "/run/spawnd/spawnd.sock"

// SocketEnv is the environment variable Dial reads when given no path.
const SocketEnv = "SPAWND_SOCKET"

// SocketPath is path, else $SPAWND_SOCKET, else DefaultSocket.
func SocketPath(path string) string {
	if path != "" {
		return path
	}
	if env := os.Getenv(SocketEnv); env != "" {
		return env
	}
	return DefaultSocket
}

// Client is one connection to the daemon, safe for concurrent use by many
// goroutines. Handles belong to the connection that made them: closing the
// client kills their programs, except detached ones (SpawnOpParams.Lease).
type Client struct {
	path string

	// A one-slot semaphore: one request line is written at a time, and a
	// caller waits for its turn under its own context.
	writing chan struct{}
	nextID  uint64
	// Set by Close: the daemon's end of the connection is then ErrClosed.
	closing int32
	// dialing is held while a connection the daemon closed is replaced.
	dialing sync.Mutex

	mu      sync.Mutex
	link    *link // the connection in use, or the last one, ended
	pending map[uint64]*pendingCall
	subs    map[string]*subscription
	// held is the handles this connection holds: spawned or attached here,
	// not yet released, each with whether notifications may come for it
	// (spawned with Notify, or attached). A connection lost while it holds
	// one is not dialed again: its handles went with it.
	held map[string]bool

	// waits is the one spawn_wait loop every Wait joins.
	waits *waiter
	// probes holds a place per probe in progress (MaxProbesInProgress).
	probes chan struct{}
}

// link is one connection to the daemon: a Client has one at a time, and
// dials a new one when the daemon closed the last while it held no
// handles.
type link struct {
	conn net.Conn
	done chan struct{}
	err  error // why it ended, once it has (under Client.mu)
}

// pendingCall is a request written and not yet answered.
type pendingCall struct {
	method string
	link   *link
	// frameBytes is the request line's length without its newline, to
	// know which calls an oversized-frame error (id null) stands for.
	frameBytes int
	answer     chan answer // capacity 1: the reader never blocks on it
	// onResult runs in the reader goroutine before the answer is handed
	// over and before the next line is read: a spawn's notification
	// queue is made there, ahead of its first notification.
	onResult func(result json.RawMessage)
	// onAbandoned runs (in its own goroutine) with the result of a call
	// whose caller stopped waiting: a spawn's handle is released.
	onAbandoned func(result json.RawMessage)
	abandoned   bool
}

type answer struct {
	result json.RawMessage
	err    error
}

// Dial connects to the daemon's socket at path; "" is $SPAWND_SOCKET, or
// DefaultSocket when that is unset (SocketPath). The context bounds the
// connecting only. A socket that cannot be reached is a *ConnectionError.
//
// The daemon closes a connection idle for long (120 s by default). A call
// on a client whose connection the daemon closed while it held no handles
// dials again, once, and goes on the new connection. One closed while it
// held handles is not dialed again: those handles ended with it (their
// programs were killed, detached ones parked for their lease), and every
// call fails with the *ConnectionError that names them.
func Dial(ctx context.Context, path string) (*Client, error) {
	path = SocketPath(path)
	c := &Client{
		path:    path,
		writing: make(chan struct{}, 1),
		pending: make(map[uint64]*pendingCall),
		subs:    make(map[string]*subscription),
		held:    make(map[string]bool),
	}
	l, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.link = l
	c.waits = newWaiter(c)
	c.probes = make(chan struct{}, MaxProbesInProgress)
	go c.readLoop(l, bufio.NewReaderSize(l.conn, 64<<10))
	return c, nil
}

func (c *Client) dial(ctx context.Context) (*link, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		return nil, &ConnectionError{Err: err, Path: c.path}
	}
	return &link{conn: conn, done: make(chan struct{})}, nil
}

// current is the connection in use, or the last one when it has ended.
func (c *Client) current() *link {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.link
}

// usable is the connection for a new call: the one in use, or a new one
// when the daemon closed the last while it held no handles. Otherwise it
// is why the last one ended.
func (c *Client) usable(ctx context.Context) (*link, error) {
	c.mu.Lock()
	l := c.link
	err := l.err
	c.mu.Unlock()
	if err == nil {
		return l, nil
	}
	if atomic.LoadInt32(&c.closing) == 1 {
		return nil, ErrClosed
	}
	if !redialable(err) {
		return nil, err
	}
	c.dialing.Lock()
	defer c.dialing.Unlock()
	c.mu.Lock()
	if c.link != l {
		// Another call dialed meanwhile.
		l = c.link
		err = l.err
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	c.mu.Unlock()
	next, dialErr := c.dial(ctx)
	if dialErr != nil {
		return nil, dialErr
	}
	c.mu.Lock()
	if atomic.LoadInt32(&c.closing) == 1 {
		c.mu.Unlock()
		_ = next.conn.Close()
		return nil, ErrClosed
	}
	c.link = next
	c.mu.Unlock()
	go c.readLoop(next, bufio.NewReaderSize(next.conn, 64<<10))
	return next, nil
}

// redialable says whether a connection that ended with err may be
// replaced: lost (not closed by Close) while it held no handles.
func redialable(err error) bool {
	ce, ok := err.(*ConnectionError)
	return ok && ce.Lost && len(ce.Handles) == 0
}

// Path is the socket this client dialed.
func (c *Client) Path() string { return c.path }

// Done is closed once the connection in use has ended (Close, or the
// daemon closed it); Err then says why. After the client dialed again
// (see Dial), Done is the new connection's.
func (c *Client) Done() <-chan struct{} { return c.current().done }

// Err is nil while the connection is open, then ErrClosed after Close or
// a *ConnectionError when the connection was lost.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.link.err
}

// Handles is the handles this connection holds (spawned or attached
// here, not released), sorted.
func (c *Client) Handles() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heldLocked()
}

func (c *Client) heldLocked() []string {
	out := make([]string, 0, len(c.held))
	for h := range c.held {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

func (c *Client) hold(handle string, notifies bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.link.err == nil {
		c.held[handle] = notifies
	}
}

func (c *Client) unhold(handle string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, handle)
}

// closeWait bounds how long Close waits for the daemon to close its side.
const closeWait = 5 * time.Second

// Close ends the connection. It stops sending and waits (at most 5 s) for
// the daemon to close its side: by then the daemon has answered the calls
// in flight and ended this connection's handles — killed their programs,
// or parked the detached ones for their lease, ready for SpawnAttach on
// another connection. Calls still in flight then return ErrClosed.
func (c *Client) Close() error {
	atomic.StoreInt32(&c.closing, 1)
	c.dialing.Lock()
	l := c.current()
	c.dialing.Unlock()
	if uc, ok := l.conn.(*net.UnixConn); ok && uc.CloseWrite() == nil {
		wait := time.NewTimer(closeWait)
		defer wait.Stop()
		select {
		case <-l.done:
		case <-wait.C:
		}
	}
	c.shutdown(l, ErrClosed)
	return nil
}

// Call sends any method with params (nil for none) and decodes its result
// into result (nil to drop it). The typed methods are built on it; use it
// for a method this version does not know.
func (c *Client) Call(ctx context.Context, method string, params, result interface{}) error {
	return c.call(ctx, method, params, result, nil, nil)
}

type request struct {
	JSONRPC string      `json:"jsonrpc"`
	ID      uint64      `json:"id"`
	Method  string      `json:"method"`
	Params  interface{} `json:"params,omitempty"`
}

// notification is a request line without an id: the daemon answers none.
type notification struct {
	JSONRPC string      `json:"jsonrpc"`
	Method  string      `json:"method"`
	Params  interface{} `json:"params,omitempty"`
}

// MethodCancelRequest is the notification that ends a wait or probe in
// progress at the daemon (LSP's `$/cancelRequest {id}`): the daemon
// answers that request -32800 and frees its slot. A call whose context
// ends while it is in progress sends it; spawns and stdin writes are not
// ended by it.
const MethodCancelRequest = "$/cancelRequest"

// MaxProbesInProgress is how many probes (health, connectors_status,
// spawn_check) the daemon takes in progress per connection; the client
// holds more until one is answered, so that they are not refused.
const MaxProbesInProgress = 4

func isProbe(method string) bool {
	return method == "health" || method == "connectors_status" || method == "spawn_check"
}

func (c *Client) call(ctx context.Context, method string, params, result interface{},
	onResult, onAbandoned func(json.RawMessage)) error {
	done := func() {}
	if isProbe(method) {
		select {
		case c.probes <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		done = func() { <-c.probes }
	}
	id, p, err := c.start(ctx, method, params, onResult, onAbandoned)
	if err != nil {
		done()
		return err
	}
	select {
	case a := <-p.answer:
		done()
		return decodeAnswer(method, a, result)
	case <-ctx.Done():
		// A spawn runs to its end whatever is sent (its handle is released
		// when its answer comes); any other call in progress is cancelled at
		// the daemon, which frees its place. The caller does not wait on
		// that write; a probe's place is the client's again once it is sent.
		if c.abandon(id, p) && p.onAbandoned == nil {
			go func() {
				c.cancelAtDaemon(p.link, id)
				done()
			}()
		} else {
			done()
		}
		return ctx.Err()
	}
}

// start writes a request and registers it for its answer, which comes on
// the pendingCall's channel.
func (c *Client) start(ctx context.Context, method string, params interface{},
	onResult, onAbandoned func(json.RawMessage)) (uint64, *pendingCall, error) {
	l, err := c.usable(ctx)
	if err != nil {
		return 0, nil, err
	}
	id := atomic.AddUint64(&c.nextID, 1)
	if params == nil {
		params = struct{}{}
	}
	line, err := json.Marshal(request{JSONRPC: "2.0", ID: id, Method: method, Params: params})
	if err != nil {
		return 0, nil, fmt.Errorf("spawnd: %s: encode params: %w", method, err)
	}
	p := &pendingCall{
		method:      method,
		link:        l,
		frameBytes:  len(line),
		answer:      make(chan answer, 1),
		onResult:    onResult,
		onAbandoned: onAbandoned,
	}
	line = append(line, '\n')
	c.mu.Lock()
	if l.err != nil {
		err := l.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.pending[id] = p
	c.mu.Unlock()
	if err := c.write(ctx, l, line); err != nil {
		c.forget(id)
		return 0, nil, err
	}
	return id, p, nil
}

func decodeAnswer(method string, a answer, result interface{}) error {
	if a.err != nil {
		return a.err
	}
	if result == nil {
		return nil
	}
	if err := decodeResult(a.result, result); err != nil {
		return fmt.Errorf("spawnd: %s: decode result: %w", method, err)
	}
	return nil
}

// cancelWrite bounds how long sending a $/cancelRequest waits for its
// turn to write.
const cancelWrite = 10 * time.Second

// cancelAtDaemon sends $/cancelRequest for the request id, best effort:
// a connection that has ended has nothing to cancel.
func (c *Client) cancelAtDaemon(l *link, id uint64) {
	line, err := json.Marshal(notification{JSONRPC: "2.0", Method: MethodCancelRequest,
		Params: map[string]uint64{"id": id}})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelWrite)
	defer cancel()
	_ = c.write(ctx, l, append(line, '\n'))
}

// write sends one whole request line. Waiting for the turn to write
// follows the context; a line once begun is written whole, since a frame
// cut in the middle would corrupt every later one.
func (c *Client) write(ctx context.Context, l *link, line []byte) error {
	select {
	case c.writing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.done:
		return c.linkErr(l)
	}
	defer func() { <-c.writing }()
	if err := c.linkErr(l); err != nil {
		return err
	}
	if _, err := l.conn.Write(line); err != nil {
		// A daemon that closed the connection may have said why first (a
		// limit refusing the connection): the read loop gets a second to
		// read it, so the ConnectionError carries it (Last).
		wait := time.NewTimer(time.Second)
		defer wait.Stop()
		select {
		case <-l.done:
		case <-wait.C:
			c.shutdown(l, &ConnectionError{Err: err, Path: c.path})
		case <-ctx.Done():
			c.shutdown(l, &ConnectionError{Err: err, Path: c.path})
		}
		return c.linkErr(l)
	}
	return nil
}

// linkErr is why the connection l ended, or nil while it is open.
func (c *Client) linkErr(l *link) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return l.err
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// abandon is called when a caller stops waiting, and says whether the
// request is still in progress at the daemon (not answered yet). A call
// with an onAbandoned hook stays pending so the hook sees its answer; if
// the answer came already, the hook gets it now.
func (c *Client) abandon(id uint64, p *pendingCall) bool {
	c.mu.Lock()
	if _, ok := c.pending[id]; ok {
		if p.onAbandoned != nil {
			p.abandoned = true
		} else {
			delete(c.pending, id)
		}
		c.mu.Unlock()
		return true
	}
	c.mu.Unlock()
	select {
	case a := <-p.answer:
		if a.err == nil && p.onAbandoned != nil {
			go p.onAbandoned(a.result)
		}
	default:
	}
	return false
}

// frame is any line the daemon sends: an answer or a notification.
type frame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *wireError      `json:"error"`
}

type wireError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// readLoop reads the daemon's lines until the connection ends. An error
// the daemon sent with id null as its last line (an idle or frame timeout,
// overload at connect) is why it closed: the ConnectionError carries it.
func (c *Client) readLoop(l *link, r *bufio.Reader) {
	var last *Error
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 && (err == nil || err == io.EOF) {
			last = c.handleLine(l, line)
		}
		if err != nil {
			if atomic.LoadInt32(&c.closing) == 1 {
				c.shutdown(l, ErrClosed)
			} else {
				c.shutdown(l, &ConnectionError{Err: err, Path: c.path, Last: last})
			}
			return
		}
	}
}

// handleLine hands one line on: an answer to its call, a notification to
// its handle's subscription, an error with id null to unmatched. It returns
// that error when unmatched keeps it (see readLoop), else nil.
func (c *Client) handleLine(l *link, line []byte) *Error {
	var f frame
	if err := json.Unmarshal(line, &f); err != nil {
		// Not JSON: the stream can no longer be trusted.
		c.shutdown(l, &ConnectionError{Err: fmt.Errorf("the daemon sent a line that is not JSON: %w", err), Path: c.path})
		return nil
	}
	if f.Method != "" && len(f.ID) == 0 {
		c.route(notificationFrom(f.Method, f.Params))
		return nil
	}
	if len(f.ID) == 0 || string(f.ID) == "null" {
		return c.unmatched(f)
	}
	id, err := strconv.ParseUint(string(f.ID), 10, 64)
	if err != nil {
		return nil // not an id this client sends
	}
	c.answerCall(id, f)
	return nil
}

// answerCall hands an answer to the call waiting for it, if any.
func (c *Client) answerCall(id uint64, f frame) {
	var a answer
	c.mu.Lock()
	p, ok := c.pending[id]
	if !ok {
		c.mu.Unlock()
		return
	}
	if f.Error != nil {
		a.err = &Error{Code: f.Error.Code, Message: f.Error.Message, Data: f.Error.Data, Method: p.method}
	} else {
		a.result = f.Result
	}
	c.mu.Unlock()
	// Outside the lock (it takes it), and before the next line is read.
	if a.err == nil && p.onResult != nil && !c.isAbandoned(p) {
		p.onResult(a.result)
	}
	c.mu.Lock()
	if _, still := c.pending[id]; !still {
		// The connection ended meanwhile, and told the caller so.
		c.mu.Unlock()
		return
	}
	delete(c.pending, id)
	if p.abandoned {
		c.mu.Unlock()
		if a.err == nil {
			go p.onAbandoned(a.result)
		}
		return
	}
	// Under the lock, so that abandon either marks the call before this
	// or finds the answer in the channel after it.
	p.answer <- a
	c.mu.Unlock()
}

func (c *Client) isAbandoned(p *pendingCall) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.abandoned
}

// unmatched handles an error answered with id null. An oversized frame
// (-32600 with data.max_frame_bytes) was dropped by the daemon unread, so
// every call whose line was over that size gets the error as its answer;
// the connection stays open. Any other is returned, for the
// ConnectionError if the daemon then closes the connection.
func (c *Client) unmatched(f frame) *Error {
	if f.Error == nil {
		return nil
	}
	e := &Error{Code: f.Error.Code, Message: f.Error.Message, Data: f.Error.Data}
	limit, oversized := e.MaxFrameBytes()
	if !oversized {
		return e
	}
	c.mu.Lock()
	var failed []*pendingCall
	for id, p := range c.pending {
		if p.frameBytes > limit {
			delete(c.pending, id)
			if !p.abandoned {
				failed = append(failed, p)
			}
		}
	}
	c.mu.Unlock()
	for _, p := range failed {
		p.answer <- answer{err: &Error{Code: e.Code, Message: e.Message, Data: e.Data, Method: p.method}}
	}
	return nil
}

// shutdown ends the connection l once: every call in flight on it gets
// why, and every notification channel is closed after what it holds. A
// lost connection's error names the handles that went with it.
func (c *Client) shutdown(l *link, why error) {
	c.mu.Lock()
	if l.err != nil || c.link != l {
		c.mu.Unlock()
		return
	}
	if ce, ok := why.(*ConnectionError); ok {
		ce.Lost = true
		ce.Handles = c.heldLocked()
	}
	c.held = make(map[string]bool)
	l.err = why
	pending := c.pending
	c.pending = map[uint64]*pendingCall{}
	subs := c.subs
	c.subs = map[string]*subscription{}
	close(l.done)
	c.mu.Unlock()
	_ = l.conn.Close()
	for _, p := range pending {
		if !p.abandoned {
			p.answer <- answer{err: why}
		}
	}
	for _, s := range subs {
		s.finish(why == ErrClosed)
	}
}
