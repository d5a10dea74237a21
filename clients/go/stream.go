package spawnd

// This file owns the conveniences a connector runtime wants on top of the
// methods: running an operation to its result (Wait is waiter.go's),
// reading a whole stream as an io.Reader (following `skipped`), and
// streaming stdin as an io.Writer in frames within the daemon's limit.

import (
	"context"
	"errors"
	"io"
	"time"
)

// longWait is how long one waiting call asks the daemon to block; loops
// ask again until the end or the context's deadline (the daemon caps a
// wait at 60 s).
const longWait = 10 * time.Second

// waitFor is the wait for one call: longWait, or less when the context's
// deadline comes sooner.
func waitFor(ctx context.Context) time.Duration {
	wait := longWait
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < wait {
			wait = left
		}
	}
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	return wait
}

// Run runs an operation and returns its result, output included (up to
// the caps), then releases the handle. A refusal is the error.
func (c *Client) Run(ctx context.Context, p SpawnOpParams) (*Status, error) {
	s, err := c.SpawnOp(ctx, p)
	if err != nil {
		return nil, err
	}
	st, err := c.Wait(ctx, s.Handle)
	release, cancel := context.WithTimeout(context.Background(), longWait)
	defer cancel()
	if rerr := c.SpawnRelease(release, s.Handle); err == nil && rerr != nil {
		return st, rerr
	}
	return st, err
}

// DefaultReadLen is how many bytes one spawn_output_read asks for.
const DefaultReadLen = 256 << 10

// OutputReader reads a stream of a spawn from its start to its end, live while the program runs: each Read waits for new output.
// Bytes that left the daemon's window before they were read are skipped
// and counted, never made up.
type OutputReader struct {
	c      *Client
	ctx    context.Context
	handle string
	which  Stream
	offset int64
	// skipped counts bytes that left the window before they could be read.
	skipped int64
	buf     []byte
	eof     bool
}

// NewOutputReader reads the handle's stream which from offset 0; the
// context bounds every read.
func (c *Client) NewOutputReader(ctx context.Context, handle string, which Stream) *OutputReader {
	return &OutputReader{c: c, ctx: ctx, handle: handle, which: which}
}

// fill waits for output when none is buffered; io.EOF once the stream has
// ended and every byte is read.
func (r *OutputReader) fill() error {
	for len(r.buf) == 0 {
		if r.eof {
			return io.EOF
		}
		chunk, err := r.c.SpawnOutputRead(r.ctx, r.handle, r.which, r.offset, DefaultReadLen, waitFor(r.ctx))
		if err != nil {
			return err
		}
		r.skipped += chunk.Skipped
		r.offset += chunk.Skipped + int64(len(chunk.Data))
		r.buf, r.eof = chunk.Data, chunk.EOF
	}
	return nil
}

// Read reads output, waiting for it while the program runs; io.EOF once
// the stream has ended and every byte is read.
func (r *OutputReader) Read(p []byte) (int, error) {
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// WriteTo copies the rest of the stream to w, chunk by chunk.
func (r *OutputReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if err := r.fill(); err == io.EOF {
			return total, nil
		} else if err != nil {
			return total, err
		}
		n, err := w.Write(r.buf)
		total += int64(n)
		r.buf = r.buf[n:]
		if err != nil {
			return total, err
		}
	}
}

// Skipped is how many bytes the reader could not read because they left
// the daemon's window first (output past the cap of a program faster
// than its reader).
func (r *OutputReader) Skipped() int64 { return r.skipped }

// Offset is the stream offset of the next byte to read.
func (r *OutputReader) Offset() int64 { return r.offset - int64(len(r.buf)) }

// ReadOutput reads the whole of a stream (live until the end) and how
// many bytes were skipped.
func (c *Client) ReadOutput(ctx context.Context, handle string, which Stream) ([]byte, int64, error) {
	r := c.NewOutputReader(ctx, handle, which)
	data, err := io.ReadAll(r)
	return data, r.Skipped(), err
}

// DefaultStdinChunk is how many bytes a StdinWriter sends per frame: as
// base64 in its request line, well within the daemon's default 1 MiB
// max_frame_bytes.
const DefaultStdinChunk = 256 << 10

// StdinWriter streams a program's stdin (a spawn made with StdinStream):
// each Write is cut into frames of ChunkSize, each sent once the one
// before is in the program's pipe, so the daemon never buffers more than
// one frame of it. Close ends the stdin.
type StdinWriter struct {
	c      *Client
	ctx    context.Context
	handle string
	// ChunkSize is the bytes per spawn_stdin_write (DefaultStdinChunk
	// unless set). A daemon whose max_frame_bytes is smaller answers the
	// first frame with its limit (the frame is dropped unread), and the
	// writer lowers ChunkSize to fit and sends the bytes again.
	ChunkSize int
}

// NewStdinWriter writes to the handle's stdin; the context bounds every
// write and the close.
func (c *Client) NewStdinWriter(ctx context.Context, handle string) *StdinWriter {
	return &StdinWriter{c: c, ctx: ctx, handle: handle, ChunkSize: DefaultStdinChunk}
}

func (w *StdinWriter) chunk() int {
	if w.ChunkSize <= 0 {
		return DefaultStdinChunk
	}
	return w.ChunkSize
}

// Write sends p in frames and returns once every byte is in the pipe.
func (w *StdinWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := len(p)
		if n > w.chunk() {
			n = w.chunk()
		}
		got, err := w.c.SpawnStdinWrite(w.ctx, w.handle, p[:n])
		written += int(got)
		if smaller, ok := w.fitFrame(err, n); ok {
			// The daemon dropped the frame unread: send it again in
			// pieces that fit.
			w.ChunkSize = smaller
			continue
		}
		if err != nil {
			return written, err
		}
		if got != int64(n) {
			return written, io.ErrShortWrite
		}
		p = p[n:]
	}
	return written, nil
}

// fitFrame is the chunk size that fits the daemon's max_frame_bytes when
// err says a frame of n bytes of data was over it.
func (w *StdinWriter) fitFrame(err error, n int) (int, bool) {
	var e *Error
	if !errors.As(err, &e) {
		return 0, false
	}
	limit, ok := e.MaxFrameBytes()
	if !ok {
		return 0, false
	}
	// base64 is 4 bytes per 3; the rest of the line (method, handle, id)
	// is well under 512 bytes.
	fits := (limit - 512) / 4 * 3
	if fits <= 0 || fits >= n {
		return 0, false
	}
	return fits, true
}

// ReadFrom sends everything r holds, a frame at a time.
func (w *StdinWriter) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, w.chunk())
	var total int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Close ends the program's stdin (spawn_stdin_close).
func (w *StdinWriter) Close() error {
	return w.c.SpawnStdinClose(w.ctx, w.handle)
}
