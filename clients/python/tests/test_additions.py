"""What a runtime author's trial asked of the clients, against scripted
daemons: connecting again after the daemon closed an idle connection (and
not when it held handles), `ping`, `spawn_list` and `spawn_kill(signal=)`
with typed results, typed states, exits, isolation and network sections,
one-line errors, and the params of every method checked against
docs/protocol.schema.json."""

import asyncio
import json
import os
import socket
import tempfile
import threading
import unittest
from pathlib import Path

from spawnd_client import (
    AsyncClient,
    CapabilityDenied,
    Client,
    ConnectionLost,
    Envelope,
    Exit,
    Signal,
    SpawnStatus,
    State,
)

IDLE_CLOSE = {"code": -32600, "message": "idle for 120000 ms with no handle ([server] idle_timeout_ms); closing"}


class FakeDaemons:
    """Accepts connections one after another, running the next of
    `scripts` on each; a script gets a `Peer`."""

    def __init__(self, *scripts):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "fake.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.errors = []
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, args=(list(scripts),), daemon=True)
        self.thread.start()

    def _serve(self, scripts):
        for script in scripts:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            peer = Peer(sock)
            try:
                script(peer)
            except Exception as e:  # reported by stop()
                self.errors.append(e)
            finally:
                peer.close()

    def stop(self):
        self.thread.join(timeout=10)
        self.listener.close()
        self.dir.cleanup()
        if self.errors:
            raise self.errors[0]


class Peer:
    def __init__(self, sock):
        self.sock = sock
        self.file = sock.makefile("rwb")

    def read(self):
        line = self.file.readline()
        return json.loads(line) if line else None

    def send(self, obj):
        self.file.write(json.dumps(obj).encode() + b"\n")
        self.file.flush()

    def answer(self, request, result):
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    def close(self):
        try:
            self.file.close()
        finally:
            self.sock.close()


def idle_close(peer):
    """The daemon's idle timeout on a connection holding nothing."""
    peer.send({"jsonrpc": "2.0", "id": None, "error": IDLE_CLOSE})


def ping_then_spawn_then_drop(peer):
    r = peer.read()
    assert r["method"] == "ping" and r.get("params", {}) == {}, r
    peer.answer(r, {"version": "0.9.1"})
    r = peer.read()
    assert r["method"] == "spawn_op", r
    peer.answer(r, {"handle": "h-held"})
    r = peer.read()
    assert r["method"] == "ping", r  # dropped under this call


class Redial(unittest.TestCase):
    def test_a_connection_closed_idle_is_made_again_and_one_holding_handles_is_not(self):
        d = FakeDaemons(idle_close, ping_then_spawn_then_drop)
        c = Client(d.path)
        self.addCleanup(d.stop)
        self.addCleanup(c.close)
        deadline = 100
        while not c.closed and deadline:
            threading.Event().wait(0.05)
            deadline -= 1
        self.assertTrue(c.closed, "the daemon's close was not seen")
        self.assertEqual(c.ping().version, "0.9.1")
        self.assertEqual(d.accepted, 2)
        c.spawn_op("local://x/y", "run")
        self.assertEqual(c.handles, ["h-held"])
        with self.assertRaises(ConnectionLost) as lost:
            c.ping()
        self.assertEqual(lost.exception.handles, ("h-held",))
        self.assertIn("h-held", str(lost.exception))
        with self.assertRaises(ConnectionLost):
            c.ping()
        self.assertEqual(d.accepted, 2)

    def test_a_closed_client_does_not_connect_again(self):
        d = FakeDaemons(lambda peer: peer.read(), lambda peer: peer.read())
        c = Client(d.path)
        c.close()
        with self.assertRaises(ConnectionLost):
            c.ping()
        d.listener.close()
        d.thread.join(timeout=10)
        self.assertEqual(d.accepted, 1)
        d.dir.cleanup()


class AsyncRedial(unittest.IsolatedAsyncioTestCase):
    async def test_a_connection_closed_idle_is_made_again_and_one_holding_handles_is_not(self):
        d = FakeDaemons(idle_close, ping_then_spawn_then_drop)
        c = await AsyncClient.connect(d.path)
        for _ in range(100):
            if c.closed:
                break
            await asyncio.sleep(0.05)
        self.assertTrue(c.closed, "the daemon's close was not seen")
        self.assertEqual((await c.ping()).version, "0.9.1")
        await c.spawn_op("local://x/y", "run")
        self.assertEqual(c.handles, ["h-held"])
        with self.assertRaises(ConnectionLost) as lost:
            await c.ping()
        self.assertEqual(lost.exception.handles, ("h-held",))
        self.assertEqual(d.accepted, 2)
        await c.close()
        d.stop()


#: A spawn_list answer as the daemon words it.
LISTED = {"spawns": [
    {"handle": "h-1", "state": "running", "label": "build", "connector": "local://x/y", "op": "run",
     "detached": False, "attached": True, "lease_ms_left": None, "token": None},
    {"handle": "h-2", "state": "exited", "label": None, "connector": "local://x/y", "op": None,
     "detached": True, "attached": False, "lease_ms_left": 41000, "token": "tok"},
]}


def list_and_kill(peer):
    r = peer.read()
    assert r["method"] == "spawn_list" and r.get("params", {}) == {}, r
    peer.answer(r, LISTED)
    for want in ("SIGTERM", "SIGUSR1", None):
        r = peer.read()
        assert r["method"] == "spawn_kill" and r["params"].get("signal") == want, r
        assert want is not None or "signal" not in r["params"], r
        peer.answer(r, {})
    peer.read()


def quiet_spawn(peer):
    peer.answer(peer.read(), {"handle": "h-quiet"})
    peer.read()


class QuietSpawns(unittest.TestCase):
    def test_a_spawn_without_notify_has_no_notifications_to_wait_for(self):
        d = FakeDaemons(quiet_spawn)
        c = Client(d.path)
        self.addCleanup(d.stop)
        self.addCleanup(c.close)
        c.spawn_op("local://x/y", "run")
        with self.assertRaises(LookupError):
            c.next_notification("h-quiet")
        with self.assertRaises(LookupError):
            list(c.notifications("h-quiet"))


class AsyncQuietSpawns(unittest.IsolatedAsyncioTestCase):
    async def test_a_spawn_without_notify_has_no_notifications_to_wait_for(self):
        d = FakeDaemons(quiet_spawn)
        c = await AsyncClient.connect(d.path)
        await c.spawn_op("local://x/y", "run")
        with self.assertRaises(LookupError):
            await asyncio.wait_for(c.next_notification("h-quiet"), 5)
        await c.close()
        d.stop()


class NewMethods(unittest.TestCase):
    def test_spawn_list_is_typed_and_kill_sends_its_signal(self):
        d = FakeDaemons(list_and_kill)
        c = Client(d.path)
        self.addCleanup(d.stop)
        self.addCleanup(c.close)
        first, second = c.spawn_list()
        self.assertEqual((first.handle, first.state, first.label, first.op, first.attached), ("h-1", State.RUNNING, "build", "run", True))
        self.assertIsNone(first.token)
        self.assertEqual((second.state, second.detached, second.lease_ms_left, second.token), (State.EXITED, True, 41000, "tok"))
        c.spawn_kill("h-1", Signal.SIGTERM)
        c.spawn_kill("h-1", "SIGUSR1")
        c.spawn_kill("h-1")


ISOLATION = {
    "namespaces": ["user", "mount", "pid"], "root": "tmpfs", "network_namespace": "new; relay",
    "landlock": {"abi": 6, "status": "fully_enforced", "abstract_unix_and_signal_scoped": True,
                 "execute": {"policy": "scopes", "directories": ["/usr"]}},
    "seccomp": {"filter": "f1", "instructions": 120, "arch": "x86_64"}, "no_new_privs": True,
    "capabilities": "none", "uid": 65534, "gid": 65534, "limits_via": "cgroup",
    "limits": {"max_open_files": 7}, "missing_read_scopes": [], "created_write_scopes": [], "idmapped": [],
    "cwd": "/work", "fresh_cwd": True, "tmpfs": {"tmp_bytes": 8, "tmp_exec": False, "dev_shm_bytes": 9},
}
NETWORK = {
    "connections": 1, "refused": 2, "bytes_up": 10, "bytes_down": 20, "listed": [{"host": "example.org"}],
    "unlisted": 0, "refusals": [{"host": "10.0.0.1", "port": 22, "protocol": "tcp", "reason": "not_granted", "count": 2}],
    "refusals_unreported": 0, "connections_unreported": [], "dns_refused": [{"name": "evil.test", "type": "A"}],
    "dns_refused_more": 0, "learning": "record", "contacted": ["example.org:443"], "contacted_unlisted": 0,
}


class Values(unittest.TestCase):
    def test_states_exits_and_sections_are_typed(self):
        killed = SpawnStatus.from_json({"state": "signaled", "exit_code": None, "signal": 9, "signal_name": "SIGKILL",
                                        "isolation": ISOLATION, "network": NETWORK})
        self.assertIs(killed.state, State.SIGNALED)
        self.assertEqual(f"{killed.state}", "signaled")
        self.assertEqual(killed.exit, Exit(signal="SIGKILL", signal_number=9))
        self.assertTrue(killed.exit.signalled and not killed.exit.exited)
        self.assertEqual(str(killed.exit), "signal SIGKILL")
        self.assertEqual(killed.isolation.uid, 65534)
        self.assertEqual(killed.isolation.landlock["execute"]["policy"], "scopes")
        self.assertEqual(killed.network.refusals[0].reason, "not_granted")
        self.assertEqual(killed.network.dns_refused, [("evil.test", "A")])
        self.assertEqual(killed.network.listed, [{"host": "example.org"}])
        exited = SpawnStatus.from_json({"state": "exited", "exit_code": 0})
        self.assertEqual((exited.exit.code, exited.exit.exited, str(exited.exit)), (0, True, "exit code 0"))
        self.assertIsNone(exited.isolation)
        running = SpawnStatus.from_json({"state": "running"})
        self.assertFalse(running.ended or running.exit.exited or running.exit.signalled)
        other = SpawnStatus.from_json({"state": "paused"})
        self.assertEqual((other.state, other.state.value), ("paused", "paused"))
        self.assertTrue(other.ended)

    def test_errors_print_as_one_line(self):
        e = CapabilityDenied(-32001, "capability denied:\nno param color\n  hint: connectors_status",
                             {"class": "capability_denied", "reason": "arg_unknown", "message": "a\nb"})
        self.assertNotIn("\n", str(e))
        self.assertIn("\n", e.message)
        self.assertEqual(e.denial.reason, "arg_unknown")
        lost = ConnectionLost("lost:\nreset", handles=["h-1", "h-2"])
        self.assertNotIn("\n", str(lost))
        self.assertIn("h-1, h-2", str(lost.again()))
        self.assertEqual(lost.again().handles, ("h-1", "h-2"))


SCHEMA = Path(__file__).resolve().parents[3] / "docs" / "protocol.schema.json"

#: What a recording peer answers every request: it decodes as each result.
ANY_RESULT = {"handle": "h-1", "state": "running", "bytes": 1, "spawns": [], "version": "1", "ended": [],
              "data_b64": "", "eof": True, "text": ""}


def record_everything(peer, requests):
    while True:
        r = peer.read()
        if r is None:
            return
        requests.append(r)
        if "id" in r and r.get("params", {}).get("wait_ms") != 60000:
            peer.answer(r, ANY_RESULT)


def protocol_schema(test):
    """The jsonschema module and docs/protocol.schema.json, or `test` skipped without them."""
    try:
        import jsonschema
    except ImportError:
        test.skipTest("jsonschema is not installed (scripts/setup installs python3-jsonschema)")
    if not SCHEMA.exists():
        test.skipTest(f"{SCHEMA} is not here (not in a spawnd checkout)")
    return jsonschema, json.loads(SCHEMA.read_text())


class Schema(unittest.TestCase):
    def setUp(self):
        self.jsonschema, self.schema = protocol_schema(self)

    def validate(self, method, params):
        schema = {"$defs": self.schema["$defs"], **self.schema["methods"][method]}
        self.jsonschema.validate(params, schema, cls=self.jsonschema.Draft202012Validator)

    def valid(self, method, params):
        try:
            self.validate(method, params)
        except self.jsonschema.ValidationError:
            return False
        return True

    def test_the_results_the_fakes_send_match_the_schema_where_it_types_them(self):
        results = self.schema["results"]
        for method, result in [
            ("ping", {"version": "0.9.1"}),
            ("metrics", {"text": "spawnd_denials_total{reason=\"arg_unknown\"} 1\n"}),
            ("spawn_kill", {}),
            ("spawn_list", LISTED),
        ]:
            with self.subTest(method=method):
                schema = {"$defs": self.schema["$defs"], **results[method]}
                self.jsonschema.validate(result, schema, cls=self.jsonschema.Draft202012Validator)

    def test_every_request_with_every_optional_field_matches_the_schema(self):
        requests = []
        d = FakeDaemons(lambda peer: record_everything(peer, requests))
        c = Client(d.path)
        c.health()
        c.connectors_status()
        c.ping()
        c.spawn_list()
        c.metrics()
        c.spawn_op("local://x/y", "run", {"a": "1"}, env={"E": "1"}, cwd="/work", stdin=b"in", stdin_stream=True,
                   action=["spawn"], mode="write", timeout_ms=1000, label="l", notify=True, lease_ms=60000)
        c.spawn_op("local://x/y", "run", {"a": "1"}, stdin="text", action="spawn")
        c.spawn("local://x/y", Envelope("/bin/sh", ["sh", "-c", "true"], env={"E": "1"}, cwd="/work", stdin=b"in"),
                stdin_stream=True, action=["spawn"], mode="write", timeout_ms=1000, label="l", notify=True, lease_ms=1)
        c.spawn("local://x/y", Envelope("/bin/sh", ["sh"], stdin="text"))
        c.spawn_check("local://x/y", "run", {"a": "1"}, env={"E": "1"}, cwd="/work", action=["spawn"], mode="write",
                      timeout_ms=1000)
        c.spawn_check("local://x/y", envelope=Envelope("/bin/sh", ["sh"], env={}, cwd="/w", stdin=b"x"), action="spawn",
                      mode="write", timeout_ms=1000)
        c.spawn_status("h-1", wait_ms=1000)
        c.spawn_wait(["h-1", "h-2"], wait_ms=1000)
        c.spawn_output_size("h-1", 1)
        c.spawn_output_read("h-1", 1, 10, 100, wait_ms=1000)
        c.spawn_kill("h-1", Signal.SIGTERM)
        c.spawn_stdin_write("h-1", b"bytes")
        c.spawn_stdin_write("h-1", "text")
        c.spawn_stdin_close("h-1")
        c.spawn_attach("h-1", "tok")
        c.spawn_release("h-1")
        with self.assertRaises(TimeoutError):
            c.call("spawn_status", {"handle": "h-1", "wait_ms": 60000}, timeout=0.2)  # sends $/cancelRequest
        c.close()
        d.stop()
        sent = set()
        for r in requests:
            method, params = r["method"], r.get("params", {})
            self.assertIn(method, self.schema["methods"])
            with self.subTest(method=method, params=params):
                self.validate(method, params)
            sent.add(method)
        self.assertEqual(sent, set(self.schema["methods"]))

    def test_a_misspelled_field_does_not_validate(self):
        for method, params in [
            ("spawn_status", {"handle": "h", "wiat_ms": 1}),
            ("spawn_op", {"connector": "c", "op": "o", "args": {}, "timeuot_ms": 1}),
            ("spawn_check", {"connector": "c", "op": "o", "args": {}, "lables": "l"}),
            ("health", {"verbose": True}),
        ]:
            with self.subTest(method=method), self.assertRaises(self.jsonschema.ValidationError):
                self.validate(method, params)


if __name__ == "__main__":
    unittest.main()
