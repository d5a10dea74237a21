package spawnd

// This file owns notifications: spawn_output and spawn_exited, routed by
// handle to a channel per handle. The reader goroutine never waits for a
// consumer: each handle's queue is bounded, and output that does not fit
// is counted as skipped, as the daemon does for a slow connection.

import (
	"encoding/json"
	"sync"
)

// The notification methods.
const (
	MethodSpawnOutput = "spawn_output"
	MethodSpawnExited = "spawn_exited"
)

// NotificationBuffer is how many bytes of output a handle's notification
// queue holds for a consumer that reads slower than the program writes;
// past it, output is dropped and counted in the next Skipped.
const NotificationBuffer = 4 << 20

// Notification is a spawn_output or spawn_exited notification.
type Notification struct {
	Method string
	Handle string
	// spawn_output: the stream, and Data, which starts at stream offset
	// Offset. Skipped counts the bytes just before Offset that were never
	// sent: they left the daemon's window (or this client's queue) first.
	// The end of one notification's data plus the next one's Skipped is
	// its Offset.
	Which   Stream
	Offset  int64
	Skipped int64
	Data    []byte
	// spawn_exited: the result, with the streams' sizes and hashes and
	// without their bytes.
	Status *Status
	// Params is the notification's params as sent.
	Params json.RawMessage
}

func notificationFrom(method string, params json.RawMessage) Notification {
	n := Notification{Method: method, Params: params}
	var p struct {
		Handle  string          `json:"handle"`
		Which   Stream          `json:"which"`
		Offset  int64           `json:"offset"`
		Skipped int64           `json:"skipped"`
		Data    []byte          `json:"data_b64"`
		Status  json.RawMessage `json:"status"`
	}
	if json.Unmarshal(params, &p) != nil {
		return n
	}
	n.Handle, n.Which, n.Offset, n.Skipped, n.Data = p.Handle, p.Which, p.Offset, p.Skipped, p.Data
	if len(p.Status) > 0 && string(p.Status) != "null" {
		var s Status
		if decodeResult(p.Status, &s) == nil {
			n.Status = &s
		}
	}
	return n
}

// Notifications is the channel of the handle's notifications. A spawn
// made with Notify queues them from its answer on, so nothing is lost
// before this is called; an attached one from the attach on. The channel
// is closed after spawn_exited, when the handle is released, or when the
// connection ends (after what it holds; at Close at once). For a handle
// that gets no notifications here (spawned without Notify, or not held
// by this connection) it is closed at once.
func (c *Client) Notifications(handle string) <-chan Notification {
	c.mu.Lock()
	s, subscribed := c.subs[handle]
	notifies := c.held[handle]
	c.mu.Unlock()
	if subscribed {
		return s.out
	}
	if !notifies {
		s := newSubscription()
		s.finish(false)
		return s.out
	}
	return c.subscription(handle).out
}

// route hands a notification to its handle's queue.
func (c *Client) route(n Notification) {
	if n.Handle == "" {
		return
	}
	c.subscription(n.Handle).push(n)
}

func (c *Client) subscription(handle string) *subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.subs[handle]; ok {
		return s
	}
	s := newSubscription()
	if err := c.link.err; err != nil {
		// The connection has ended: nothing more will come.
		s.finish(err == ErrClosed)
		return s
	}
	c.subs[handle] = s
	return s
}

func (c *Client) dropSubscription(handle string) {
	c.mu.Lock()
	s, ok := c.subs[handle]
	delete(c.subs, handle)
	c.mu.Unlock()
	if ok {
		s.finish(true)
	}
}

// subscription is one handle's queue and the goroutine that feeds its
// channel.
type subscription struct {
	out  chan Notification
	wake chan struct{} // capacity 1
	stop chan struct{} // closed to abandon what is queued

	mu     sync.Mutex
	queue  []Notification
	queued int // bytes of output in queue
	// dropped counts, per stream, output that did not fit, and where the
	// last of it ended.
	dropped [2]struct {
		any   bool
		count int64
		end   int64
	}
	ended   bool
	stopped bool
}

func newSubscription() *subscription {
	s := &subscription{
		out:  make(chan Notification),
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	go s.pump()
	return s
}

func (s *subscription) push(n Notification) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	switch n.Method {
	case MethodSpawnOutput:
		w := n.Which & 1
		d := &s.dropped[w]
		if s.queued+len(n.Data) > NotificationBuffer {
			d.any = true
			d.count += n.Skipped + int64(len(n.Data))
			d.end = n.Offset + int64(len(n.Data))
			s.mu.Unlock()
			return
		}
		if d.any {
			n.Skipped += d.count
			d.any, d.count = false, 0
		}
		s.queued += len(n.Data)
		s.queue = append(s.queue, n)
	case MethodSpawnExited:
		// What was dropped is told before the end, so offsets add up.
		for w := range s.dropped {
			if d := &s.dropped[w]; d.any {
				s.queue = append(s.queue, Notification{Method: MethodSpawnOutput, Handle: n.Handle,
					Which: Stream(w), Offset: d.end, Skipped: d.count})
				d.any, d.count = false, 0
			}
		}
		s.queue = append(s.queue, n)
		s.ended = true
	default:
		s.queue = append(s.queue, n)
	}
	s.mu.Unlock()
	s.poke()
}

// finish marks that nothing more comes: the channel closes after what is
// queued, or at once when abandon is set.
func (s *subscription) finish(abandon bool) {
	s.mu.Lock()
	s.ended = true
	if abandon && !s.stopped {
		s.stopped = true
		close(s.stop)
	}
	s.mu.Unlock()
	s.poke()
}

func (s *subscription) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscription) pump() {
	defer close(s.out)
	for {
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
		for {
			s.mu.Lock()
			batch := s.queue
			s.queue, s.queued = nil, 0
			ended := s.ended
			s.mu.Unlock()
			if len(batch) == 0 {
				if ended {
					return
				}
				break
			}
			for _, n := range batch {
				select {
				case s.out <- n:
				case <-s.stop:
					return
				}
			}
		}
	}
}
