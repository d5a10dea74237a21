package spawnd

// This file owns the one spawn_wait loop of a connection: every Wait joins
// it, so however many goroutines wait, the daemon holds one wait of this
// connection's (its waits are bounded per connection) and the other calls
// never queue behind them.

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
)

// MaxWaitHandles is how many handles one spawn_wait names at most: the
// daemon's limit of handles per connection.
const MaxWaitHandles = 64

// waiter keeps one spawn_wait in flight over the handles waited on.
type waiter struct {
	c *Client

	mu sync.Mutex
	// tickets are the waiters of each handle.
	tickets map[string]map[*waitTicket]struct{}
	// set is the handles the loop waits on, in the order they joined; a
	// handle whose waiters all left stays until the next restart.
	set     []string
	running bool
	// wake (capacity 1) tells the loop that a handle joined or that
	// nobody waits any more.
	wake chan struct{}
}

// waitTicket is one Wait's place: nil once its handle has ended, or why
// it never will be seen to (a handle not found, the loop's call failed).
type waitTicket struct {
	done chan error // capacity 1
}

func newWaiter(c *Client) *waiter {
	return &waiter{c: c, tickets: make(map[string]map[*waitTicket]struct{}), wake: make(chan struct{}, 1)}
}

// join adds a waiter of handle, and starts the loop or has it restart
// when the handle is new to the set.
func (w *waiter) join(handle string) *waitTicket {
	t := &waitTicket{done: make(chan error, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tickets[handle] == nil {
		w.tickets[handle] = make(map[*waitTicket]struct{})
	}
	w.tickets[handle][t] = struct{}{}
	if !contains(w.set, handle) {
		w.set = append(w.set, handle)
		w.signal()
	}
	if !w.running {
		w.running = true
		go w.loop()
	}
	return t
}

// leave takes a waiter out; when nobody waits any more the loop is told,
// so that it ends its spawn_wait and stops.
func (w *waiter) leave(handle string, t *waitTicket) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.tickets[handle], t)
	if len(w.tickets[handle]) == 0 {
		delete(w.tickets, handle)
	}
	if len(w.tickets) == 0 {
		w.signal()
	}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// batch is the handles the next spawn_wait names: the set without the
// handles nobody waits on, at most MaxWaitHandles (the rest join once
// room is made). With none, the loop is marked stopped.
func (w *waiter) batch() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.set[:0]
	for _, h := range w.set {
		if len(w.tickets[h]) > 0 {
			kept = append(kept, h)
		}
	}
	w.set = kept
	if len(kept) == 0 {
		w.running = false
		return nil
	}
	if len(kept) > MaxWaitHandles {
		kept = kept[:MaxWaitHandles]
	}
	return append([]string(nil), kept...)
}

// loop keeps one spawn_wait in flight over the batch, restarting it when
// the batch changes, until nobody waits or the connection ends.
func (w *waiter) loop() {
	var (
		inFlight []string
		id       uint64
		call     *pendingCall
	)
	giveUp := func() {
		if call != nil && w.c.abandon(id, call) {
			// Before the next spawn_wait, so the daemon holds one.
			w.c.cancelAtDaemon(call.link, id)
		}
		call = nil
	}
	defer giveUp()
	for {
		batch := w.batch()
		if batch == nil {
			return
		}
		if call == nil || !equal(batch, inFlight) {
			giveUp()
			params := struct {
				Handles []string `json:"handles"`
				WaitMS  int64    `json:"wait_ms"`
			}{batch, millis(longWait)}
			var err error
			id, call, err = w.c.start(context.Background(), "spawn_wait", params, nil, nil)
			if err != nil {
				w.failAll(err)
				continue
			}
			inFlight = batch
		}
		select {
		case a := <-call.answer:
			call = nil
			w.answered(inFlight, a)
		case <-w.wake:
		}
	}
}

// answered hands a spawn_wait's answer to the waiters: the handles that
// ended to theirs, a handle not found to its own; any other error ends
// every wait. A timeout (none ended) and a cancelled call change nothing.
func (w *waiter) answered(batch []string, a answer) {
	if a.err == nil {
		var r WaitResult
		if err := json.Unmarshal(a.result, &r); err != nil {
			w.failAll(err)
			return
		}
		for _, h := range r.Ended {
			if contains(batch, h) {
				w.finish(h, nil)
			}
		}
		return
	}
	var e *Error
	if errors.As(a.err, &e) {
		if e.Code == CodeRequestCancelled {
			return
		}
		if h := e.NotFoundHandle(); h != "" && contains(batch, h) {
			w.finish(h, a.err)
			return
		}
	}
	w.failAll(a.err)
}

// finish ends the waits of handle and takes it out of the set.
func (w *waiter) finish(handle string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for t := range w.tickets[handle] {
		t.done <- err
	}
	delete(w.tickets, handle)
	w.set = remove(w.set, handle)
}

// failAll ends every wait with err.
func (w *waiter) failAll(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ts := range w.tickets {
		for t := range ts {
			t.done <- err
		}
	}
	w.tickets = make(map[string]map[*waitTicket]struct{})
	w.set = nil
}

// Wait blocks until the spawn has ended (or ctx ends) and returns its
// result. Every Wait on a connection joins one loop that keeps a single
// spawn_wait in flight over all the handles waited on, so a thousand Waits
// hold one of the daemon's waits for this connection; once the handle has
// ended, its status is read with spawn_status (without a wait). A handle
// not found fails its own Wait only (ErrNotFound); a connection that ends
// fails them all.
func (c *Client) Wait(ctx context.Context, handle string) (*Status, error) {
	l := c.current()
	for {
		t := c.waits.join(handle)
		select {
		case err := <-t.done:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			c.waits.leave(handle, t)
			return nil, ctx.Err()
		case <-l.done:
			c.waits.leave(handle, t)
			return nil, c.linkErr(l)
		}
		s, err := c.SpawnStatus(ctx, handle, 0)
		if err != nil {
			return nil, err
		}
		if s.Ended() {
			return s, nil
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func remove(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
