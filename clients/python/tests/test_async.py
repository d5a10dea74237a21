"""The asyncio client against a real `spawnd serve`: every method, the typed
errors, and what one connection carries at once (docs/daemon.md)."""

import asyncio
import hashlib
import os
import time
import unittest

from spawnd_client import (
    STDERR,
    STDOUT,
    AsyncClient,
    CapabilityDenied,
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


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.c = await AsyncClient.connect(SOCKET)

    async def asyncTearDown(self) -> None:
        await self.c.close()

    async def sh(self, script: str, **kw) -> str:
        return (await self.c.spawn_op(CONNECTOR, "sh", {"script": script}, **kw)).handle


class EveryMethod(AsyncTest):
    async def test_health_and_connectors_status(self):
        self.assertEqual((await self.c.health())["protocol_version"], 1)
        status = await self.c.connectors_status()
        self.assertEqual([p.name for p in status.connectors[CONNECTOR].operation("sh").params], ["script"])

    async def test_spawn_op_status_size_and_reads(self):
        h = await self.sh("printf 'b%.0s' $(seq 500); echo err >&2")
        done = await self.c.spawn_status(h, wait_ms=PATIENCE_MS)
        self.assertEqual((done.state, done.exit_code), ("exited", 0))
        self.assertEqual((await self.c.spawn_output_size(h, STDOUT)).bytes, 500)
        first = await self.c.spawn_output_read(h, STDOUT, 0, 200)
        self.assertEqual(first.data, b"b" * 200)
        self.assertEqual((await self.c.read_output(h, STDOUT, chunk=64)).data, b"b" * 500)
        self.assertEqual((await self.c.read_output(h, STDERR)).data, b"err\n")

    async def test_spawn_of_an_envelope_and_spawn_check(self):
        h = (await self.c.spawn(CONNECTOR, envelope("cat", stdin="async\n"))).handle
        self.assertEqual((await self.c.wait(h)).stdout.data, b"async\n")
        plan = await self.c.spawn_check(CONNECTOR, "sh", {"script": "true"})
        self.assertEqual(plan["decision"], "allowed")

    async def test_kill_and_release(self):
        h = await self.sh("sleep 60")
        await self.c.spawn_kill(h)
        self.assertEqual((await self.c.wait(h)).signal, 9)
        await self.c.spawn_release(h)
        with self.assertRaises(NotFound):
            await self.c.spawn_status(h)


class TypedErrors(AsyncTest):
    async def test_a_refusal_is_capability_denied_with_its_denial(self):
        with self.assertRaises(CapabilityDenied) as caught:
            await self.c.spawn_op(CONNECTOR, "sh", {"script": "--help"})
        self.assertEqual(caught.exception.denial.reason, "option_injection")
        self.assertTrue(caught.exception.denial.audit_id)

    async def test_unknown_method_invalid_params_and_unknown_handle(self):
        with self.assertRaises(MethodNotFound):
            await self.c.call("no_such_method")
        with self.assertRaises(InvalidParams):
            await self.c.call("spawn_status", {"handle": []})
        with self.assertRaises(NotFound):
            await self.c.spawn_status("h-0000")

    async def test_an_oversized_frame_is_invalid_request_and_the_connection_stays(self):
        with self.assertRaises(InvalidRequest) as caught:
            await self.c.spawn_op(CONNECTOR, "sh", {"script": "true"}, stdin="y" * (2 << 20))
        self.assertGreater(caught.exception.max_frame_bytes, 0)
        self.assertEqual((await self.c.health())["protocol_version"], 1)

    async def test_calls_after_close_are_connection_lost(self):
        c = await AsyncClient.connect(SOCKET)
        await c.close()
        with self.assertRaises(ConnectionLost):
            await c.health()
        with self.assertRaises(ConnectionLost):
            await AsyncClient.connect(SOCKET + ".absent")


class OneConnectionManyRequests(AsyncTest):
    async def test_a_long_status_wait_does_not_hold_up_another_answer(self):
        h = await self.sh("sleep 60")
        waiting = asyncio.ensure_future(self.c.spawn_status(h, wait_ms=PATIENCE_MS))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        self.assertEqual((await self.c.health())["protocol_version"], 1)
        self.assertLess(time.monotonic() - started, PATIENCE_S / 3)
        self.assertFalse(waiting.done())
        await self.c.spawn_kill(h)
        self.assertEqual((await asyncio.wait_for(waiting, PATIENCE_S)).state, "signaled")

    async def test_many_tasks_share_one_connection(self):
        async def run(i):
            return (await self.c.wait(await self.sh(f"echo {i}"))).stdout.data

        got = await asyncio.gather(*(run(i) for i in range(8)))
        self.assertEqual(got, [f"{i}\n".encode() for i in range(8)])

    async def test_64_waits_hold_up_neither_a_kill_nor_health(self):
        handles = []
        for i in range(64):
            while True:
                try:
                    handles.append(await self.sh(f"echo {i}; exec sleep 300"))
                    break
                except Overloaded:  # earlier tests' programs still ending
                    await asyncio.sleep(0.05)
        waits = [asyncio.ensure_future(self.c.wait(h)) for h in handles]
        await asyncio.sleep(0.3)  # time for the waits to join
        self.assertEqual((await self.c.health())["protocol_version"], 1)
        self.assertEqual((await self.c.spawn_status(handles[0], wait_ms=1)).state, "running")
        for h in handles:
            await self.c.spawn_kill(h)
        done = await asyncio.wait_for(asyncio.gather(*waits), PATIENCE_S)
        self.assertEqual([(s.state, s.signal, s.stdout.data) for s in done],
                         [("signaled", 9, f"{i}\n".encode()) for i in range(64)])

    async def test_spawn_wait(self):
        slow, quick = await self.sh("sleep 60"), await self.sh("true")
        first = await self.c.spawn_wait([slow, quick], wait_ms=PATIENCE_MS)
        self.assertEqual((first.handle, first.ended), (quick, [quick]))
        self.assertIsNone((await self.c.spawn_wait([slow], wait_ms=100)).handle)
        await self.c.spawn_kill(slow)

    async def test_notifications(self):
        h = await self.sh("echo one; echo two", notify=True)
        out, exited = b"", None

        async def collect():
            nonlocal out, exited
            async for note in self.c.notifications(h):
                if isinstance(note, SpawnOutputNote) and note.which == STDOUT:
                    out += note.data
                elif isinstance(note, SpawnExitedNote):
                    exited = note.status

        await asyncio.wait_for(collect(), PATIENCE_S)
        self.assertEqual(out, b"one\ntwo\n")
        self.assertEqual(exited.exit_code, 0)


class StreamedStdinAndDetach(AsyncTest):
    async def test_two_megabytes_of_stdin_go_through_stdin_writes(self):
        data = os.urandom(2 << 20)
        h = await self.sh("sha256sum", stdin_stream=True)
        self.assertEqual(await self.c.write_stdin(h, data), len(data))
        done = await self.c.wait(h)
        self.assertEqual(done.stdout.data.split()[0].decode(), hashlib.sha256(data).hexdigest())

    async def test_a_detached_spawn_attaches_on_another_connection(self):
        first = await AsyncClient.connect(SOCKET)
        spawned = await first.spawn_op(CONNECTOR, "sh", {"script": "sleep 1; echo later"}, lease_ms=60_000)
        await first.close()
        attached = await self.c.spawn_attach(spawned.handle, spawned.token)
        self.assertEqual(attached.handle, spawned.handle)
        done = await self.c.wait(spawned.handle)
        self.assertEqual(done.stdout.data, b"later\n")


if __name__ == "__main__":
    unittest.main()
