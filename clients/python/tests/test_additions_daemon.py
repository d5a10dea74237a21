"""The protocol additions (`ping`, `spawn_list`, `spawn_kill`'s `signal`)
against a real `spawnd serve`, skipped on a daemon that has no `ping`; and
both clients connecting again after a daemon closed an idle connection."""

import asyncio
import os
import time
import unittest

from spawnd_client import AsyncClient, Client, InvalidParams, Signal, State

from .support import CONNECTOR, PATIENCE_S, SOCKET


class Additions(unittest.TestCase):
    def setUp(self):
        self.c = Client(SOCKET)
        self.addCleanup(self.c.close)
        self.pong = self.c.ping()

    def test_ping_list_and_a_signal_the_program_handles(self):
        self.assertTrue(self.pong.version)
        script = "trap 'echo term; exit 3' TERM; echo ready; while :; do sleep 0.05; done"
        spawned = self.c.spawn_op(CONNECTOR, "sh", {"script": script}, label="trapper")
        mine = [e for e in self.c.spawn_list() if e.handle == spawned.handle]
        self.assertEqual(len(mine), 1)
        entry = mine[0]
        self.assertEqual((entry.state, entry.attached, entry.detached, entry.label, entry.op, entry.token),
                         (State.RUNNING, True, False, "trapper", "sh", None))
        first = next(self.c.iter_output(spawned.handle))
        self.assertEqual(first.data, b"ready\n")
        with self.assertRaises(InvalidParams):
            self.c.spawn_kill(spawned.handle, "SIGSTOP")
        self.c.spawn_kill(spawned.handle, Signal.SIGTERM)
        result = self.c.wait(spawned.handle, timeout=PATIENCE_S)
        self.assertEqual((result.exit.code, result.stdout.data), (3, b"ready\nterm\n"))
        self.c.spawn_release(spawned.handle)
        self.assertEqual(self.c.handles, [])


IDLE_SOCKET = os.environ.get("SPAWND_IDLE_SOCKET", "")
NO_IDLE_DAEMON = "no SPAWND_IDLE_SOCKET (a daemon with a short idle_timeout_ms; integration/clients.rs starts one)"


@unittest.skipUnless(IDLE_SOCKET, NO_IDLE_DAEMON)
class IdleClose(unittest.TestCase):
    def test_a_connection_the_daemon_closed_idle_is_made_again(self):
        with Client(IDLE_SOCKET) as c:
            c.health()
            deadline = time.monotonic() + PATIENCE_S
            while not c.closed and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertTrue(c.closed, "the daemon did not close the idle connection")
            self.assertIn("status", c.health())
            self.assertFalse(c.closed)


@unittest.skipUnless(IDLE_SOCKET, NO_IDLE_DAEMON)
class AsyncIdleClose(unittest.IsolatedAsyncioTestCase):
    async def test_a_connection_the_daemon_closed_idle_is_made_again(self):
        c = await AsyncClient.connect(IDLE_SOCKET)
        try:
            await c.health()
            deadline = time.monotonic() + PATIENCE_S
            while not c.closed and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            self.assertTrue(c.closed, "the daemon did not close the idle connection")
            await c.health()
            self.assertFalse(c.closed)
        finally:
            await c.close()


if __name__ == "__main__":
    unittest.main()
