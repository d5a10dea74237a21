"""The pure parts: frames, params, errors and results as values, no daemon."""

import base64
import json
import unittest

from spawnd_client import (
    AuditUnavailable,
    CapabilityDenied,
    CredentialError,
    Envelope,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    Overloaded,
    ParseError,
    SandboxUnavailable,
    SpawndError,
    SpawnStatus,
    WaitResult,
)
from spawnd_client.errors import error_from_json
from spawnd_client.protocol import (
    InFlight,
    encode_frame,
    spawn_op_params,
    spawn_params,
    stdin_chunk_for,
    stdin_write_params,
)
from spawnd_client.results import ConnectorsStatus, OutputChunk

DENIAL = {
    "class": "capability_denied", "boundary": "sandbox", "boundary_detail": "envelope",
    "reason": "value_invalid", "connector": "local://a/b", "requested": "arg:x",
    "granted": ["pattern /a/"], "placeholder": "{x}", "message": "fix it", "audit_id": "abc",
    "later_field": 1,
}


class Errors(unittest.TestCase):
    def test_each_code_of_the_table_has_its_class(self):
        table = {
            -32700: ParseError, -32600: InvalidRequest, -32601: MethodNotFound,
            -32602: InvalidParams, -32001: CapabilityDenied, -32002: NotFound,
            -32003: Overloaded, -32004: SandboxUnavailable, -32005: CredentialError,
            -32006: AuditUnavailable, -32603: InternalError,
        }
        for code, cls in table.items():
            e = error_from_json({"code": code, "message": "m", "data": None})
            self.assertIs(type(e), cls)
            self.assertEqual((e.code, e.message), (code, "m"))
        other = error_from_json({"code": -1, "message": "?"})
        self.assertIs(type(other), SpawndError)

    def test_a_denial_keeps_every_field(self):
        e = error_from_json({"code": -32005, "message": "m", "data": DENIAL})
        d = e.denial
        self.assertEqual((d.reason, d.placeholder, d.audit_id, d.granted), ("value_invalid", "{x}", "abc", ["pattern /a/"]))
        self.assertEqual(d.raw["later_field"], 1)
        self.assertEqual(e.reason, "value_invalid")

    def test_a_frame_error_tells_the_limit(self):
        e = error_from_json({"code": -32600, "message": "m", "data": {"max_frame_bytes": 100}})
        self.assertEqual(e.max_frame_bytes, 100)


class Frames(unittest.TestCase):
    def test_a_frame_is_one_json_line(self):
        frame = encode_frame(3, "health", None)
        self.assertTrue(frame.endswith(b"\n"))
        self.assertEqual(frame.count(b"\n"), 1)
        self.assertEqual(json.loads(frame), {"jsonrpc": "2.0", "id": 3, "method": "health"})

    def test_stdin_text_and_bytes_travel_as_the_protocol_says(self):
        self.assertEqual(spawn_op_params("c", "o", stdin="t")["stdin"], "t")
        self.assertEqual(base64.b64decode(spawn_op_params("c", "o", stdin=b"\xff")["stdin_b64"]), b"\xff")
        self.assertEqual(stdin_write_params("h", "t"), {"handle": "h", "data": "t"})
        self.assertEqual(stdin_write_params("h", b"b")["data_b64"], "Yg==")
        env = spawn_params("c", Envelope("/p", ["p"], stdin=b"x"), lease_ms=5, notify=True)
        self.assertEqual(env["envelope"], {"program": "/p", "argv": ["p"], "env": {}, "stdin_b64": "eA=="})
        self.assertEqual((env["lease_ms"], env["notify"]), (5, True))
        self.assertNotIn("notify", spawn_op_params("c", "o"))

    def test_a_stdin_chunk_fits_its_frame(self):
        for limit in (1024, 4096, 1 << 20):
            n = stdin_chunk_for(limit)
            self.assertLessEqual(len(encode_frame(10**9, "spawn_stdin_write", stdin_write_params("h" * 64, b"\0" * n))), limit)

    def test_an_id_null_frame_error_goes_to_the_oldest_oversized_request(self):
        t = InFlight()
        small, big1, big2 = t.add(10, "small"), t.add(500, "big1"), t.add(600, "big2")
        err = error_from_json({"code": -32600, "message": "m", "data": {"max_frame_bytes": 100}})
        self.assertEqual(t.match_null(err), big1)
        self.assertEqual(t.pop(big1), "big1")
        self.assertEqual(t.match_null(err), big2)
        self.assertIsNone(t.match_null(error_from_json({"code": -32700, "message": "m"})))
        self.assertEqual(t.pop(small), "small")


class Results(unittest.TestCase):
    def test_the_next_read_goes_past_skipped_and_data(self):
        c = OutputChunk.from_json(100, {"data_b64": "YWJj", "eof": False, "skipped": 7})
        self.assertEqual((c.data, c.next_offset), (b"abc", 110))

    def test_spawn_wait_reads_ended_as_handles_or_objects(self):
        self.assertEqual(WaitResult.from_json({"handle": "a", "state": "exited", "ended": ["a"]}).ended, ["a"])
        self.assertEqual(WaitResult.from_json({"handle": "a", "state": "exited", "ended": [{"handle": "a", "state": "exited"}]}).ended, ["a"])
        none = WaitResult.from_json({"handle": None, "state": "running", "ended": []})
        self.assertIsNone(none.handle)

    def test_a_status_keeps_every_field_and_decodes_both_stream_forms(self):
        s = SpawnStatus.from_json({
            "state": "exited", "exit_code": 0, "timings": {"x": 1},
            "stdout": {"text": "hi", "bytes": 2, "total_bytes": 2, "truncated": False, "sha256": "sha256:…"},
            "stderr": {"base64": "/w==", "bytes": 1, "total_bytes": 1, "truncated": False},
        })
        self.assertTrue(s.ok and s.ended)
        self.assertEqual((s.stdout.data, s.stderr.data, s.stderr.text), (b"hi", b"\xff", None))
        self.assertEqual(s["timings"], {"x": 1})

    def test_connectors_status_reads_connectors_by_name(self):
        st = ConnectorsStatus.from_json({
            "captured_at": "t", "block": "b",
            "connectors": {
                "local://a/b": {"status": "connected", "operations": [
                    {"name": "op", "description": "d", "mode": "readonly",
                     "params": [{"name": "x", "kind": "path", "required": False, "default": "."}]}]},
                "local://a/off": {"status": "disabled_by_admin", "reason": "r"},
            },
        })
        op = st.connectors["local://a/b"].operation("op")
        self.assertEqual((op.params[0].kind, op.params[0].default), ("path", "."))
        self.assertTrue(st.connectors["local://a/off"].disabled)
        self.assertEqual(st.connectors["local://a/off"].operations, [])


if __name__ == "__main__":
    unittest.main()
