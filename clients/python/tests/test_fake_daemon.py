"""The clients against a scripted daemon on a socket of their own: answers
out of order, a notification right behind its spawn's answer, a frame error
with id null among requests in flight, and the connection dropped under a
call. These pin the client's side of docs/daemon.md exactly, whatever the
real daemon does at the time."""

import asyncio
import base64
import json
import os
import socket
import tempfile
import threading
import unittest

from spawnd_client import (
    AsyncClient,
    Client,
    ConnectionLost,
    InvalidRequest,
    NotFound,
    Overloaded,
    SpawnExitedNote,
    SpawnOutputNote,
)

MAX_FRAME = 4096


class FakeDaemon:
    """Accepts one connection and hands it to `script(conn)`, where `conn`
    reads requests (`read()`) and writes lines (`send(obj)`)."""

    def __init__(self, script):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "fake.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.error = None
        self.thread = threading.Thread(target=self._serve, args=(script,), daemon=True)
        self.thread.start()

    def _serve(self, script):
        sock, _ = self.listener.accept()
        self.sock = sock
        self.file = sock.makefile("rwb")
        try:
            script(self)
        except Exception as e:  # reported by stop()
            self.error = e
        finally:
            self.file.close()
            sock.close()

    def read(self):
        line = self.file.readline()
        if not line:
            return None  # the client closed the connection
        if len(line) > MAX_FRAME:
            return {"oversized": len(line)}
        return json.loads(line)

    def send(self, obj):
        self.file.write(json.dumps(obj).encode() + b"\n")
        self.file.flush()

    def answer(self, request, result):
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    def fail(self, request, code, message, data=None):
        error = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self.send({"jsonrpc": "2.0", "id": request["id"], "error": error})

    def stop(self):
        self.thread.join(timeout=10)
        self.listener.close()
        self.dir.cleanup()
        if self.error:
            raise self.error


def out_of_order(d):
    """Two requests, answered second first."""
    first, second = d.read(), d.read()
    d.answer(second, {"second": second["method"]})
    d.answer(first, {"first": first["method"]})
    d.read()  # until the client closes


def notify_right_after_spawn(d):
    spawn = d.read()
    d.answer(spawn, {"handle": "h-1"})
    data = base64.b64encode(b"hi\n").decode()
    d.send({"jsonrpc": "2.0", "method": "spawn_output",
            "params": {"handle": "h-1", "which": 0, "offset": 0, "data_b64": data, "skipped": 0}})
    d.send({"jsonrpc": "2.0", "method": "spawn_exited",
            "params": {"handle": "h-1", "status": {"state": "exited", "exit_code": 0,
                                                   "stdout": {"bytes": 3, "total_bytes": 3, "truncated": False}}}})
    d.read()


def frame_error_among_others(d):
    """A waiting request, then an oversized one: the error has id null."""
    waiting = d.read()
    big = d.read()
    assert "oversized" in big, big
    d.send({"jsonrpc": "2.0", "id": None,
            "error": {"code": -32600, "message": "frame too large", "data": {"max_frame_bytes": MAX_FRAME}}})
    d.answer(waiting, {"state": "running"})
    d.read()


def stdin_writes_shrink_to_the_limit(d):
    """Refuses frames over MAX_FRAME as the daemon does, records the rest."""
    got = bytearray()
    while True:
        r = d.read()
        if "oversized" in r:
            d.send({"jsonrpc": "2.0", "id": None,
                    "error": {"code": -32600, "message": "too large", "data": {"max_frame_bytes": MAX_FRAME}}})
            continue
        if r["method"] == "spawn_stdin_close":
            d.answer(r, {})
            break
        chunk = base64.b64decode(r["params"]["data_b64"])
        got += chunk
        d.answer(r, {"bytes": len(chunk)})
    r = d.read()
    d.answer(r, {"received": base64.b64encode(bytes(got)).decode()})
    d.read()


def drop_the_connection(d):
    """Holds a handle, then drops the connection under a call."""
    d.answer(d.read(), {"handle": "h"})
    d.read()


HANDLES = [f"h-{i:02d}" for i in range(64)]


def cancelled_id(r):
    """The id a `$/cancelRequest` names, once it is seen to be a notification."""
    assert r["method"] == "$/cancelRequest" and "id" not in r, r
    return r["params"]["id"]


def until_one_spawn_wait_names(d, want):
    """Reads the wait loop's `spawn_wait`s (and the cancellations of those
    it restarts) until one names every handle of `want`; fails if a second
    is ever in flight or anything else comes. Returns that request."""
    in_flight = set()
    while True:
        r = d.read()
        if r["method"] == "spawn_wait":
            assert not in_flight, f"a second spawn_wait in flight: {r['id']} with {in_flight}"
            assert r["params"]["wait_ms"] > 0, r
            in_flight.add(r["id"])
            if sorted(r["params"]["handles"]) == sorted(want):
                return r
        elif r["method"] == "$/cancelRequest":
            request_id = cancelled_id(r)
            assert request_id in in_flight, f"cancels {request_id}, not the spawn_wait in flight {in_flight}"
            in_flight.discard(request_id)
        else:
            raise AssertionError(f"the wait loop sent {r}")


def one_spawn_wait_for_64_waits(d):
    """64 waits: one spawn_wait in flight however they join, then each
    handle's status read once without a wait, then nothing from the loop."""
    every = until_one_spawn_wait_names(d, HANDLES)
    d.answer(every, {"handle": HANDLES[0], "state": "exited", "ended": HANDLES})
    asked = set()
    for _ in HANDLES:
        r = d.read()
        assert r["method"] == "spawn_status" and "wait_ms" not in r["params"], r
        assert r["params"]["handle"] not in asked, r
        asked.add(r["params"]["handle"])
        d.answer(r, {"state": "exited", "exit_code": 0, "stdout": {"text": r["params"]["handle"]}})
    r = d.read()
    assert r["method"] == "ping", f"after every wait returned: {r}"
    d.answer(r, True)
    d.read()


def not_found_fails_its_own_waiter(d):
    first = until_one_spawn_wait_names(d, ["h-gone", "h-live"])
    d.fail(first, -32002, "no such handle on this connection", {"handle": "h-gone"})
    r = d.read()
    assert r["method"] == "spawn_wait" and r["params"]["handles"] == ["h-live"], r
    d.answer(r, {"handle": "h-live", "state": "signaled", "ended": ["h-live"]})
    r = d.read()
    assert r["method"] == "spawn_status" and r["params"] == {"handle": "h-live"}, r
    d.answer(r, {"state": "signaled", "signal": 9, "interrupted_by": "spawn_kill"})
    d.read()


def a_given_up_call_is_cancelled(d):
    """A status wait whose caller gives up, then a wait whose caller gives
    up: each is cancelled at the daemon by its id."""
    status = d.read()
    assert status["method"] == "spawn_status", status
    assert cancelled_id(d.read()) == status["id"]
    d.fail(status, -32800, "cancelled by $/cancelRequest")
    loop = until_one_spawn_wait_names(d, ["h-1"])
    # Nobody waits: the loop gives up its spawn_wait, while the caller
    # goes on to its next call.
    later = [d.read(), d.read()]
    ping = next(r for r in later if r["method"] == "ping")
    d.answer(ping, True)
    later.remove(ping)
    assert cancelled_id(later[0]) == loop["id"], later
    d.read()


def overloads_with_and_without_data(d):
    d.fail(d.read(), -32003, "at the limit of 16 running spawns ([server] running_spawns_share)",
           {"limit": "server.running_spawns_share", "max": 16, "asked": 1, "caller_uses": 16, "all_use": 40})
    d.fail(d.read(), -32003, "this connection has 64 waiting requests in progress",
           {"limit": "waits_in_progress_per_connection", "max": 64, "caller_uses": 64})
    d.fail(d.read(), -32003, "busy")
    d.read()


def wait_then_drop(d):
    until_one_spawn_wait_names(d, ["h-1", "h-2"])


class SyncAgainstTheFake(unittest.TestCase):
    def run_fake(self, script):
        d = FakeDaemon(script)
        c = Client(d.path)

        def done():
            c.close()
            d.stop()

        self.addCleanup(done)
        return c

    def test_answers_go_to_their_callers_by_id_in_any_order(self):
        c = self.run_fake(out_of_order)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("a", c.call("a")))
        t.start()
        while len(c._in_flight) == 0:
            pass
        got["b"] = c.call("b")
        t.join()
        self.assertEqual(got, {"a": {"first": "a"}, "b": {"second": "b"}})

    def test_a_notification_right_behind_the_answer_is_kept_for_its_handle(self):
        c = self.run_fake(notify_right_after_spawn)
        h = c.spawn_op("local://x/y", "op", notify=True).handle
        notes = list(c.notifications(h, timeout=10))
        self.assertIsInstance(notes[0], SpawnOutputNote)
        self.assertEqual((notes[0].data, notes[0].next_offset), (b"hi\n", 3))
        self.assertIsInstance(notes[1], SpawnExitedNote)
        self.assertEqual(notes[1].status.stdout.bytes, 3)
        self.assertIsNone(notes[1].status.stdout.data)

    def test_a_frame_error_with_id_null_goes_to_the_oversized_request(self):
        c = self.run_fake(frame_error_among_others)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("wait", c.spawn_status("h", wait_ms=1000)))
        t.start()
        while len(c._in_flight) == 0:
            pass
        with self.assertRaises(InvalidRequest) as caught:
            c.spawn_stdin_write("h", b"x" * (2 * MAX_FRAME))
        self.assertEqual(caught.exception.max_frame_bytes, MAX_FRAME)
        t.join()
        self.assertEqual(got["wait"].state, "running")
        self.assertEqual(c.max_frame_bytes, MAX_FRAME)

    def test_write_stdin_splits_what_the_daemon_refuses_as_too_large(self):
        c = self.run_fake(stdin_writes_shrink_to_the_limit)
        data = os.urandom(20_000)
        self.assertEqual(c.write_stdin("h", data, chunk=10_000), len(data))
        self.assertEqual(base64.b64decode(c.call("report")["received"]), data)

    def test_a_dropped_connection_is_connection_lost_for_calls_in_flight_and_later(self):
        c = self.run_fake(drop_the_connection)
        c.spawn_op("local://x/y", "run")
        with self.assertRaises(ConnectionLost):
            c.spawn_status("h", wait_ms=1000)
        # It held a handle: the client does not connect again.
        with self.assertRaises(ConnectionLost) as lost:
            c.health()
        self.assertEqual(lost.exception.handles, ("h",))
        with self.assertRaises(ConnectionLost):
            c.next_notification("h", timeout=1)

    def test_64_waits_keep_one_spawn_wait_in_flight_and_read_each_status_without_waiting(self):
        c = self.run_fake(one_spawn_wait_for_64_waits)
        got = {}
        threads = [threading.Thread(target=lambda h=h: got.setdefault(h, c.wait(h, timeout=30))) for h in HANDLES]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual({h: s.stdout.text for h, s in got.items()}, {h: h for h in HANDLES})
        self.assertTrue(c.call("ping"))

    def test_a_handle_not_found_fails_only_its_own_wait(self):
        c = self.run_fake(not_found_fails_its_own_waiter)
        got = {}

        def wait(h):
            try:
                got[h] = c.wait(h, timeout=30)
            except NotFound as e:
                got[h] = e

        threads = [threading.Thread(target=wait, args=(h,)) for h in ("h-gone", "h-live")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertIsInstance(got["h-gone"], NotFound)
        self.assertEqual(got["h-gone"].handle, "h-gone")
        self.assertEqual((got["h-live"].state, got["h-live"].signal), ("signaled", 9))

    def test_a_call_or_wait_that_times_out_is_cancelled_at_the_daemon(self):
        c = self.run_fake(a_given_up_call_is_cancelled)
        with self.assertRaises(TimeoutError):
            c.call("spawn_status", {"handle": "h-1", "wait_ms": 60_000}, timeout=0.2)
        with self.assertRaises(TimeoutError):
            c.wait("h-1", timeout=0.2)
        self.assertTrue(c.call("ping"))

    def test_a_lost_connection_fails_every_wait(self):
        c = self.run_fake(wait_then_drop)
        errors = []

        def wait(h):
            try:
                c.wait(h, timeout=30)
            except ConnectionLost as e:
                errors.append(e)

        threads = [threading.Thread(target=wait, args=(h,)) for h in ("h-1", "h-2")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(errors), 2)

    def test_an_overload_names_the_limit_and_what_the_caller_uses(self):
        c = self.run_fake(overloads_with_and_without_data)
        with self.assertRaises(Overloaded) as caught:
            c.spawn_op("local://x/y", "op")
        e = caught.exception
        self.assertEqual((e.limit, e.max, e.asked, e.caller_uses, e.all_use),
                         ("server.running_spawns_share", 16, 1, 16, 40))
        with self.assertRaises(Overloaded) as caught:
            c.spawn_status("h", wait_ms=1000)
        e = caught.exception
        self.assertEqual((e.limit, e.max, e.asked, e.caller_uses, e.all_use),
                         ("waits_in_progress_per_connection", 64, None, 64, None))
        with self.assertRaises(Overloaded) as caught:
            c.health()
        self.assertIsNone(caught.exception.limit)


class AsyncAgainstTheFake(unittest.IsolatedAsyncioTestCase):
    async def test_answers_notifications_and_frame_errors(self):
        d = FakeDaemon(out_of_order)
        c = await AsyncClient.connect(d.path)
        a = asyncio.ensure_future(c.call("a"))
        await asyncio.sleep(0.05)
        self.assertEqual(await c.call("b"), {"second": "b"})
        self.assertEqual(await a, {"first": "a"})
        await c.close()
        d.stop()

        d = FakeDaemon(notify_right_after_spawn)
        c = await AsyncClient.connect(d.path)
        h = (await c.spawn_op("local://x/y", "op", notify=True)).handle
        notes = [n async for n in c.notifications(h)]
        self.assertEqual([type(n) for n in notes], [SpawnOutputNote, SpawnExitedNote])
        await c.close()
        d.stop()

        d = FakeDaemon(frame_error_among_others)
        c = await AsyncClient.connect(d.path)
        waiting = asyncio.ensure_future(c.spawn_status("h", wait_ms=1000))
        await asyncio.sleep(0.05)
        with self.assertRaises(InvalidRequest):
            await c.spawn_stdin_write("h", b"x" * (2 * MAX_FRAME))
        self.assertEqual((await waiting).state, "running")
        await c.close()
        d.stop()

        d = FakeDaemon(stdin_writes_shrink_to_the_limit)
        c = await AsyncClient.connect(d.path)
        data = os.urandom(20_000)
        self.assertEqual(await c.write_stdin("h", data, chunk=10_000), len(data))
        self.assertEqual(base64.b64decode((await c.call("report"))["received"]), data)
        await c.close()
        d.stop()

        d = FakeDaemon(drop_the_connection)
        c = await AsyncClient.connect(d.path)
        await c.spawn_op("local://x/y", "run")
        with self.assertRaises(ConnectionLost):
            await c.spawn_status("h", wait_ms=1000)
        with self.assertRaises(ConnectionLost) as lost:
            await c.health()
        self.assertEqual(lost.exception.handles, ("h",))
        await c.close()
        d.stop()


    async def test_waits_share_one_spawn_wait_and_cancelled_calls_are_cancelled_at_the_daemon(self):
        d = FakeDaemon(one_spawn_wait_for_64_waits)
        c = await AsyncClient.connect(d.path)
        got = await asyncio.wait_for(asyncio.gather(*(c.wait(h) for h in HANDLES)), 30)
        self.assertEqual([s.stdout.text for s in got], HANDLES)
        self.assertTrue(await c.call("ping"))
        await c.close()
        d.stop()

        d = FakeDaemon(not_found_fails_its_own_waiter)
        c = await AsyncClient.connect(d.path)
        gone, live = await asyncio.gather(c.wait("h-gone"), c.wait("h-live"), return_exceptions=True)
        self.assertIsInstance(gone, NotFound)
        self.assertEqual(gone.handle, "h-gone")
        self.assertEqual(live.signal, 9)
        await c.close()
        d.stop()

        d = FakeDaemon(a_given_up_call_is_cancelled)
        c = await AsyncClient.connect(d.path)
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(c.spawn_status("h-1", wait_ms=60_000), 0.2)
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(c.wait("h-1"), 0.2)
        self.assertTrue(await c.call("ping"))
        await c.close()
        d.stop()

        d = FakeDaemon(wait_then_drop)
        c = await AsyncClient.connect(d.path)
        lost = await asyncio.gather(c.wait("h-1"), c.wait("h-2"), return_exceptions=True)
        self.assertEqual([type(e) for e in lost], [ConnectionLost, ConnectionLost])
        await c.close()
        d.stop()

        d = FakeDaemon(overloads_with_and_without_data)
        c = await AsyncClient.connect(d.path)
        with self.assertRaises(Overloaded) as caught:
            await c.spawn_op("local://x/y", "op")
        self.assertEqual((caught.exception.limit, caught.exception.all_use), ("server.running_spawns_share", 40))
        with self.assertRaises(Overloaded) as caught:
            await c.spawn_status("h", wait_ms=1000)
        self.assertEqual(caught.exception.limit, "waits_in_progress_per_connection")
        with self.assertRaises(Overloaded):
            await c.health()
        await c.close()
        d.stop()


if __name__ == "__main__":
    unittest.main()
