"""The blocking client against a real `spawnd serve`: every method, the
typed errors, and what one connection carries at once (docs/daemon.md)."""

import hashlib
import io
import os
import queue
import threading
import time
import unittest

from spawnd_client import (
    STDERR,
    STDOUT,
    CapabilityDenied,
    Client,
    ConnectionLost,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    Overloaded,
    SpawnExitedNote,
    SpawnOutputNote,
)

from .support import CONNECTOR, PATIENCE_MS, PATIENCE_S, SOCKET, envelope


def hold_connections_until_refused(test: unittest.TestCase) -> list:
    """Opens raw connections, each asking `health` and reading its answer,
    until one is refused for the uid's limit; keeps the served ones open
    until the test ends."""
    import json
    import socket

    held = []
    for _ in range(1000):
        s = socket.socket(socket.AF_UNIX)
        test.addCleanup(s.close)
        s.connect(SOCKET)
        try:
            s.sendall(b'{"jsonrpc": "2.0", "id": 1, "method": "health"}\n')
        except BrokenPipeError:
            pass
        with s.makefile() as f:
            answer = json.loads(f.readline())
        if answer.get("id") is None:
            return held
        held.append(s)
    test.fail("no connection was refused")
    return held


def spawn_retrying(spawn):
    """`spawn()`, again while the daemon is at its limit of running spawns:
    the programs of earlier tests' connections end as the daemon notices
    those connections closed."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            return spawn()
        except Overloaded:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def wait_until_a_connection_is_served() -> None:
    """Once connections are closed, the daemon frees their places as it
    notices: a later test's connection must not be refused meanwhile."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with Client(SOCKET) as c:
                c.health()
                return
        except ConnectionLost:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class SyncTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = Client(SOCKET)
        self.addCleanup(self.c.close)

    def sh(self, script: str, **kw):
        return self.c.spawn_op(CONNECTOR, "sh", {"script": script}, **kw).handle


class EveryMethod(SyncTest):
    def test_health_speaks_protocol_version_1(self):
        self.assertEqual(self.c.health()["protocol_version"], 1)

    def test_connectors_status_lists_the_sh_operation_and_its_script_param(self):
        status = self.c.connectors_status()
        self.assertIn(CONNECTOR, status.connectors)
        self.assertIn("<connector_status", status.block)
        sh = status.connectors[CONNECTOR].operation("sh")
        self.assertIsNotNone(sh)
        self.assertEqual([p.name for p in sh.params], ["script"])
        self.assertTrue(sh.params[0].required)
        self.assertEqual(sh.params[0].kind, "string")

    def test_connectors_status_as_the_daemon_answers_it_matches_the_protocol_schema(self):
        from .test_additions import protocol_schema
        jsonschema, schema = protocol_schema(self)
        answer = self.c.call("connectors_status", {})
        jsonschema.validate(answer, {"$defs": schema["$defs"], **schema["results"]["connectors_status"]},
                            cls=jsonschema.Draft202012Validator)
        self.assertIn(CONNECTOR, answer["connectors"])

    def test_spawn_op_runs_and_spawn_status_gives_the_run_result(self):
        h = self.sh("echo out; echo err >&2; exit 3")
        done = self.c.spawn_status(h, wait_ms=PATIENCE_MS)
        self.assertEqual(done.state, "exited")
        self.assertEqual(done.exit_code, 3)
        self.assertFalse(done.ok)
        self.assertEqual(done.stdout.data, b"out\n")
        self.assertEqual(done.stdout.text, "out\n")
        self.assertEqual(done.stderr.data, b"err\n")
        self.assertTrue(done.audit_id)
        self.assertIn("isolation", done.raw)  # nothing of the result is lost

    def test_output_size_and_reads_in_chunks_give_the_whole_stream(self):
        h = self.sh("printf 'a%.0s' $(seq 1000); printf tail >&2")
        self.c.wait(h)
        size = self.c.spawn_output_size(h, STDOUT)
        self.assertEqual((size.bytes, size.truncated), (1000, False))
        chunks, offset = [], 0
        while True:
            c = self.c.spawn_output_read(h, STDOUT, offset, 300)
            chunks.append(c.data)
            offset = c.next_offset
            if c.eof:
                break
        self.assertEqual(b"".join(chunks), b"a" * 1000)
        self.assertEqual(self.c.read_output(h, STDOUT, chunk=128).data, b"a" * 1000)
        self.assertEqual(self.c.read_output(h, STDERR).data, b"tail")

    def test_read_output_follows_a_running_program_to_its_end(self):
        h = self.sh("for i in 1 2 3; do echo $i; sleep 0.2; done")
        self.assertEqual(self.c.read_output(h).data, b"1\n2\n3\n")

    def test_spawn_runs_an_envelope_with_text_or_bytes_on_stdin(self):
        h = self.c.spawn(CONNECTOR, envelope("cat", stdin="from python\n")).handle
        self.assertEqual(self.c.wait(h).stdout.data, b"from python\n")
        h = self.c.spawn(CONNECTOR, envelope("od -An -tx1", stdin=b"\x00\xff")).handle
        self.assertEqual(self.c.wait(h).stdout.data.split(), [b"00", b"ff"])
        h = self.c.spawn_op(CONNECTOR, "sh", {"script": "cat"}, stdin=b"bytes\x01").handle
        self.assertEqual(self.c.wait(h).stdout.data, b"bytes\x01")

    def test_spawn_check_gives_the_plan_and_runs_nothing(self):
        plan = self.c.spawn_check(CONNECTOR, "sh", {"script": "echo planned"})
        self.assertEqual(plan["decision"], "allowed")
        self.assertEqual(plan["argv"], ["bash", "-c", "echo planned"])
        plan = self.c.spawn_check(CONNECTOR, envelope=envelope("true"))
        self.assertEqual(plan["decision"], "allowed")

    def test_spawn_check_answers_a_denial_without_an_audit_id(self):
        with self.assertRaises(CapabilityDenied) as caught:
            self.c.spawn_check(CONNECTOR, "sh", {"script": "-x"})
        self.assertEqual(caught.exception.denial.reason, "option_injection")
        self.assertIsNone(caught.exception.denial.audit_id)

    def test_kill_ends_the_program_and_release_frees_the_handle(self):
        h = self.sh("sleep 60")
        self.c.spawn_kill(h)
        killed = self.c.wait(h)
        self.assertEqual((killed.state, killed.signal), ("signaled", 9))
        self.assertEqual(killed.interrupted_by, "spawn_kill")
        self.c.spawn_release(h)
        with self.assertRaises(NotFound):
            self.c.spawn_status(h)

    def test_timeout_ms_ends_a_program_as_timed_out(self):
        h = self.sh("sleep 60", timeout_ms=300)
        done = self.c.wait(h)
        self.assertEqual(done.state, "timed_out")
        self.assertTrue(done.timed_out)


class TypedErrors(SyncTest):
    def test_a_refusal_is_capability_denied_with_the_denial_fields(self):
        with self.assertRaises(CapabilityDenied) as caught:
            self.c.spawn_op(CONNECTOR, "sh", {"script": "-rf"})
        e = caught.exception
        self.assertEqual(e.code, -32001)
        d = e.denial
        self.assertEqual(d.reason, "option_injection")
        self.assertEqual(d.denial_class, "capability_denied")
        self.assertEqual(d.boundary, "sandbox")
        self.assertEqual(d.boundary_detail, "envelope")
        self.assertEqual(d.connector, CONNECTOR)
        self.assertEqual(d.placeholder, "{script}")
        self.assertTrue(d.audit_id)
        self.assertTrue(d.message)
        self.assertEqual(e.audit_id, d.audit_id)

    def test_an_action_subset_without_the_operation_is_action_denied(self):
        with self.assertRaises(CapabilityDenied) as caught:
            self.c.spawn_op(CONNECTOR, "sh", {"script": "true"}, action=["spawn:true"], label="python suite")
        self.assertEqual(caught.exception.denial.reason, "action_denied")
        h = self.c.spawn_op(CONNECTOR, "sh", {"script": "true"}, action=["spawn:sh"], label="python suite").handle
        self.assertTrue(self.c.wait(h).ok)

    def test_an_unknown_operation_is_not_found_with_its_denial(self):
        with self.assertRaises(NotFound) as caught:
            self.c.spawn_op(CONNECTOR, "no-such-op")
        self.assertEqual(caught.exception.reason, "op_unknown")

    def test_an_unknown_handle_is_not_found(self):
        with self.assertRaises(NotFound) as caught:
            self.c.spawn_status("h-0000")
        self.assertEqual(caught.exception.code, -32002)
        self.assertIsNone(caught.exception.denial)

    def test_another_connections_handle_is_not_found(self):
        h = self.sh("true")
        with Client(SOCKET) as other, self.assertRaises(NotFound):
            other.spawn_status(h)

    def test_an_unknown_method_is_method_not_found(self):
        with self.assertRaises(MethodNotFound) as caught:
            self.c.call("no_such_method")
        self.assertEqual(caught.exception.code, -32601)

    def test_params_of_the_wrong_type_are_invalid_params(self):
        with self.assertRaises(InvalidParams) as caught:
            self.c.call("spawn_status", {"handle": 7})
        self.assertEqual(caught.exception.code, -32602)

    def test_an_invalid_connector_name_is_invalid_params_with_its_field(self):
        with self.assertRaises(InvalidParams) as caught:
            self.c.spawn_op("not a name", "sh")
        e = caught.exception
        self.assertEqual((e.field, e.bytes), ("connector", len("not a name")))
        self.assertTrue(e.audit_id)

    def test_an_oversized_frame_is_invalid_request_and_the_connection_stays(self):
        big = "x" * (2 << 20)  # over the default max_frame_bytes (1 MiB)
        with self.assertRaises(InvalidRequest) as caught:
            self.c.spawn_op(CONNECTOR, "sh", {"script": "true"}, stdin=big)
        self.assertEqual(caught.exception.code, -32600)
        self.assertGreater(caught.exception.max_frame_bytes, 0)
        self.assertEqual(self.c.max_frame_bytes, caught.exception.max_frame_bytes)
        self.assertEqual(self.c.health()["protocol_version"], 1)

    def test_connecting_to_no_daemon_is_connection_lost(self):
        with self.assertRaises(ConnectionLost):
            Client(SOCKET + ".absent")

    def test_calls_after_close_are_connection_lost(self):
        c = Client(SOCKET)
        c.close()
        with self.assertRaises(ConnectionLost):
            c.health()

    def test_a_connection_over_the_uid_limit_is_lost_with_what_the_daemon_said(self):
        # Raw connections, each answered, up to the one the daemon refuses
        # ([server] max_connections_per_uid); the client's is refused too,
        # closed as it is accepted, and says why.
        # (Cleanups run last first: this one once the held ones are closed.)
        self.addCleanup(wait_until_a_connection_is_served)
        held = hold_connections_until_refused(self)
        self.assertTrue(held)
        c = Client(SOCKET)
        self.addCleanup(c.close)
        with self.assertRaises(ConnectionLost) as caught:
            c.health()
        last = caught.exception.last
        self.assertIsInstance(last, Overloaded)
        self.assertIn("connections open", str(caught.exception))


class OneConnectionManyRequests(SyncTest):
    def test_a_long_status_wait_does_not_hold_up_another_answer(self):
        h = self.sh("sleep 60")
        waited = queue.Queue()
        t = threading.Thread(target=lambda: waited.put(self.c.spawn_status(h, wait_ms=PATIENCE_MS)))
        t.start()
        time.sleep(0.3)  # let the wait reach the daemon first
        started = time.monotonic()
        self.assertEqual(self.c.health()["protocol_version"], 1)
        self.assertEqual(self.c.spawn_output_size(h, STDOUT).bytes, 0)
        self.assertLess(time.monotonic() - started, PATIENCE_S / 3)
        self.assertTrue(waited.empty(), "the wait answered before the program ended")
        self.c.spawn_kill(h)
        self.assertEqual(waited.get(timeout=PATIENCE_S).state, "signaled")
        t.join()

    def test_several_threads_share_one_connection(self):
        results = {}

        def run(i):
            h = self.sh(f"sleep 0.$((RANDOM % 5)); echo {i}")
            results[i] = self.c.wait(h).stdout.data

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, {i: f"{i}\n".encode() for i in range(8)})

    def test_64_waits_hold_up_neither_a_kill_nor_health_nor_another_wait(self):
        handles = [spawn_retrying(lambda i=i: self.sh(f"echo {i}; exec sleep 300")) for i in range(64)]
        results = {}

        def wait(i, h):
            try:
                results[i] = self.c.wait(h, timeout=PATIENCE_S)
            except Exception as e:
                results[i] = e

        threads = [threading.Thread(target=wait, args=(i, h)) for i, h in enumerate(handles)]
        for t in threads:
            t.start()
        time.sleep(0.3)  # time for the waits to join; nothing below depends on how many have
        self.assertEqual(self.c.health()["protocol_version"], 1)
        # The waits hold one of the connection's 64 waits, not 64 of them.
        self.assertEqual(self.c.spawn_status(handles[0], wait_ms=1).state, "running")
        for h in handles:
            self.c.spawn_kill(h)
        for t in threads:
            t.join()
        for i in range(64):
            status = results[i]
            self.assertNotIsInstance(status, Exception)
            self.assertEqual((status.state, status.signal, status.stdout.data), ("signaled", 9, f"{i}\n".encode()))
            self.assertEqual(status["interrupted_by"], "spawn_kill")

    def test_spawn_wait_gives_the_first_of_the_handles_that_ended(self):
        slow = self.sh("sleep 60")
        quick = self.sh("echo quick")
        first = self.c.spawn_wait([slow, quick], wait_ms=PATIENCE_MS)
        self.assertEqual(first.handle, quick)
        self.assertEqual(first.state, "exited")
        self.assertEqual(first.ended, [quick])
        none = self.c.spawn_wait([slow], wait_ms=200)
        self.assertIsNone(none.handle)
        self.assertEqual((none.state, none.ended), ("running", []))
        self.c.spawn_kill(slow)
        # In the order asked: `slow` comes first once it has ended.
        killed = self.c.spawn_wait([slow], wait_ms=PATIENCE_MS)
        self.assertEqual((killed.handle, killed.state), (slow, "signaled"))
        both = self.c.spawn_wait([slow, quick], wait_ms=PATIENCE_MS)
        self.assertEqual((both.handle, both.ended), (slow, [slow, quick]))

    def test_notifications_carry_the_output_then_the_exit(self):
        h = self.sh("echo one; sleep 0.2; echo two; echo e >&2", notify=True)
        out, err, exited = b"", b"", None
        for note in self.c.notifications(h, timeout=PATIENCE_S):
            if isinstance(note, SpawnOutputNote):
                self.assertEqual(note.skipped, 0)
                if note.which == STDOUT:
                    out += note.data
                else:
                    err += note.data
            elif isinstance(note, SpawnExitedNote):
                exited = note.status
        self.assertEqual((out, err), (b"one\ntwo\n", b"e\n"))
        self.assertEqual((exited.state, exited.exit_code), ("exited", 0))
        self.assertEqual(exited.stdout.bytes, len(b"one\ntwo\n"))
        self.assertIsNone(exited.stdout.data)  # sizes and hashes, no bytes

    def test_a_notification_callback_gets_every_notification(self):
        got = queue.Queue()
        with Client(SOCKET, on_notification=got.put) as c:
            h = c.spawn_op(CONNECTOR, "sh", {"script": "echo hi"}, notify=True).handle
            notes = []
            while not notes or not isinstance(notes[-1], SpawnExitedNote):
                notes.append(got.get(timeout=PATIENCE_S))
        self.assertTrue(all(n.handle == h for n in notes))
        self.assertEqual(b"".join(n.data for n in notes if isinstance(n, SpawnOutputNote)), b"hi\n")


class StreamedStdin(SyncTest):
    def test_two_megabytes_of_stdin_go_through_stdin_writes(self):
        data = os.urandom(2 << 20)
        h = self.sh("cat > /tmp/in; sha256sum < /tmp/in; wc -c < /tmp/in", stdin_stream=True)
        self.assertEqual(self.c.write_stdin(h, data), len(data))
        done = self.c.wait(h)
        self.assertEqual(done.exit_code, 0)
        digest, count = done.stdout.data.decode().split("\n")[:2]
        self.assertEqual(digest.split()[0], hashlib.sha256(data).hexdigest())
        self.assertEqual(int(count), len(data))

    def test_a_file_goes_to_stdin_in_chunks(self):
        h = self.c.spawn(CONNECTOR, envelope("wc -c"), stdin_stream=True).handle
        self.c.write_stdin(h, io.BytesIO(b"z" * 100_000), chunk=30_000)
        self.assertEqual(self.c.wait(h).stdout.data.strip(), b"100000")

    def test_writes_are_answered_with_their_size_and_refused_after_close(self):
        h = self.sh("cat", stdin_stream=True)
        self.assertEqual(self.c.spawn_stdin_write(h, "text "), 5)
        self.assertEqual(self.c.spawn_stdin_write(h, b"\x00bytes"), 6)
        self.c.spawn_stdin_close(h)
        with self.assertRaises(NotFound):
            self.c.spawn_stdin_write(h, "late")
        self.assertEqual(self.c.wait(h).stdout.data, b"text \x00bytes")


    def test_a_fifth_waiting_write_is_overloaded(self):
        h = self.sh("sleep 60", stdin_stream=True)  # never reads
        errors = queue.Queue()

        def write():
            try:
                self.c.spawn_stdin_write(h, b"w" * 300_000)  # more than a pipe holds
            except Exception as e:
                errors.put(e)

        writers = [threading.Thread(target=write) for _ in range(5)]
        for t in writers:
            t.start()
        first = errors.get(timeout=PATIENCE_S)
        self.assertIsInstance(first, Overloaded)
        self.assertEqual(first.code, -32003)
        self.c.spawn_release(h)
        for t in writers:
            t.join(timeout=PATIENCE_S)


class DetachedSpawns(SyncTest):
    def test_a_detached_spawn_outlives_its_connection_and_attaches_again(self):
        first = Client(SOCKET)
        spawned = first.spawn_op(CONNECTOR, "sh", {"script": "sleep 1; echo survived"}, lease_ms=60_000)
        self.assertTrue(spawned.token)
        first.close()
        with self.assertRaises(NotFound):
            self.c.spawn_attach(spawned.handle, "0" * 32)  # a wrong token
        attached = self.c.spawn_attach(spawned.handle, spawned.token)
        self.assertEqual(attached.handle, spawned.handle)
        self.assertFalse(attached.ended)  # it sleeps a second
        done = self.c.wait(spawned.handle)
        self.assertEqual((done.exit_code, done.stdout.data), (0, b"survived\n"))
        self.assertIsNone(done.interrupted_by)

    def test_an_attached_spawn_notifies_the_connection_that_attached_it(self):
        first = Client(SOCKET)
        spawned = first.spawn_op(CONNECTOR, "sh", {"script": "read line; echo \"got $line\""},
                                 lease_ms=60_000, notify=True, stdin_stream=True)
        first.close()
        self.c.spawn_attach(spawned.handle, spawned.token)
        self.c.write_stdin(spawned.handle, b"late\n")
        notes = list(self.c.notifications(spawned.handle, timeout=PATIENCE_S))
        out = b"".join(n.data for n in notes if isinstance(n, SpawnOutputNote))
        self.assertEqual(out, b"got late\n")
        self.assertEqual(notes[-1].status.exit_code, 0)

    def test_a_token_attaches_only_its_own_handle(self):
        first = Client(SOCKET)
        spawned = first.spawn_op(CONNECTOR, "sh", {"script": "sleep 60"}, lease_ms=60_000)
        plain = first.spawn_op(CONNECTOR, "sh", {"script": "sleep 60"})
        first.close()
        with self.assertRaises(NotFound):  # the token of another handle does not fit
            self.c.spawn_attach(plain.handle, spawned.token)
        self.c.spawn_attach(spawned.handle, spawned.token)
        self.c.spawn_release(spawned.handle)


if __name__ == "__main__":
    unittest.main()
