"""The protocol additions (`ping`, `spawn_list`, `spawn_kill`'s `signal`)
against a real `spawnd serve`; skipped on a daemon that has no `ping`."""

import unittest

from spawnd_client import Client, InvalidParams, MethodNotFound, Signal, State

from .support import CONNECTOR, PATIENCE_S, SOCKET


class Additions(unittest.TestCase):
    def setUp(self):
        self.c = Client(SOCKET)
        self.addCleanup(self.c.close)
        try:
            self.pong = self.c.ping()
        except MethodNotFound:
            self.skipTest("this daemon has no ping: the protocol additions are not in it")

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


if __name__ == "__main__":
    unittest.main()
