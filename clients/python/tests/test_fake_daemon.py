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
    d.read()


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
        with self.assertRaises(ConnectionLost):
            c.spawn_status("h", wait_ms=1000)
        with self.assertRaises(ConnectionLost):
            c.health()
        with self.assertRaises(ConnectionLost):
            c.next_notification("h", timeout=1)


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
        with self.assertRaises(ConnectionLost):
            await c.spawn_status("h", wait_ms=1000)
        with self.assertRaises(ConnectionLost):
            await c.health()
        await c.close()
        d.stop()


if __name__ == "__main__":
    unittest.main()
