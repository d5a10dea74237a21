// Package spawnd is the official Go client of the spawnd daemon
// (`spawnd serve`): JSON-RPC 2.0 over a Unix socket, one JSON object per
// line, as docs/daemon.md describes it.
//
// A [Client] is one connection. It is safe for concurrent use: each call
// writes its request under a distinct id and waits for its own answer, and
// a single reader goroutine hands every answer to the call that waits for
// it, so a slow call (a spawn, a wait, a stdin write the program does not
// read yet) never holds up another. Each call takes a context; when the
// context ends first the call returns its error, the daemon is told
// ($/cancelRequest) so that it ends the request and frees its place, and
// the answer is dropped when it comes (a spawn, which runs to its end, is
// released, so its program does not run unobserved). Every [Client.Wait]
// on a connection joins one loop that keeps a single spawn_wait in flight
// over all the handles waited on.
//
// Every method of the protocol has a typed method here (Ping, Health,
// ConnectorsStatus, Spawn, SpawnOp, SpawnCheck, SpawnStatus, SpawnWait,
// SpawnList, SpawnOutputSize, SpawnOutputRead, SpawnKill, SpawnRelease,
// SpawnStdinWrite, SpawnStdinClose, SpawnAttach), and [Client.Call] reaches
// any other. A connection the daemon closed while it held no handles (an
// idle timeout) is dialed again by the next call. Results keep the whole answer in a Raw field for keys this
// version does not name.
//
// Errors the daemon answers are [*Error] values: match them with
// errors.Is against the sentinels (ErrDenied, ErrNotFound, …) and take the
// denial object out with errors.As into a [*Denial], and the limit of a
// -32003 into an [*Overload]. A connection that ends
// fails every call in flight with a [*ConnectionError] (errors.Is
// ErrConnectionLost).
//
// Notifications (spawns made with Notify) arrive on a channel per handle,
// [Client.Notifications]. The conveniences a connector runtime wants are
// [Client.Run], [Client.Wait], [Client.NewOutputReader] (a stream read to
// its end, following `skipped`) and [Client.NewStdinWriter] (stdin
// streamed in frames within the daemon's limit).
//
// The package uses the standard library only.
package spawnd
