#!/usr/bin/env python3
"""A second spawnd client, in Python with the standard library only (socket +
json), driving every method of the daemon protocol (docs/daemon.md). It proves
the protocol is language-neutral; integration/daemon.rs runs it.

Usage: client.py SOCKET CONNECTOR   (the escape suite's test connector)
"""
import base64
import json
import socket
import sys


class Client:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.file = self.sock.makefile("rwb")
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.file.write(json.dumps(request).encode() + b"\n")
        self.file.flush()
        answer = json.loads(self.file.readline())
        assert answer["id"] == self.next_id, answer
        return answer

    def ok(self, method, **params):
        answer = self.call(method, **params)
        assert "error" not in answer, (method, answer)
        return answer["result"]


def main():
    path, connector = sys.argv[1], sys.argv[2]
    c = Client(path)
    assert c.ok("health")["protocol_version"] == 1

    h = c.ok("spawn_op", connector=connector, op="sh",
             args={"script": "printf 'a%.0s' $(seq 1000); echo tail >&2"})["handle"]
    done = c.ok("spawn_status", handle=h, wait_ms=10000)
    assert done["state"] == "exited" and done["exit_code"] == 0, done
    assert c.ok("spawn_output_size", handle=h, which=0) == {"bytes": 1000, "truncated": False}
    chunks, offset = [], 0
    while True:
        r = c.ok("spawn_output_read", handle=h, which=0, offset=offset, len=300)
        data = base64.b64decode(r["data_b64"])
        chunks.append(data)
        offset += len(data)
        if r["eof"]:
            break
    assert b"".join(chunks) == b"a" * 1000
    assert base64.b64decode(c.ok("spawn_output_read", handle=h, which=1, offset=0, len=10)["data_b64"]) == b"tail\n"

    envelope = {"program": "/usr/bin/bash", "argv": ["bash", "-c", "cat"], "env": {}, "stdin": "from python\n"}
    h2 = c.ok("spawn", connector=connector, envelope=envelope)["handle"]
    assert c.ok("spawn_status", handle=h2, wait_ms=10000)["stdout"]["text"] == "from python\n"

    h3 = c.ok("spawn_op", connector=connector, op="sh", args={"script": "sleep 60"})["handle"]
    c.ok("spawn_kill", handle=h3)
    killed = c.ok("spawn_status", handle=h3, wait_ms=10000)
    assert killed["state"] == "signaled" and killed["signal"] == 9, killed
    c.ok("spawn_release", handle=h3)
    assert c.call("spawn_status", handle=h3)["error"]["code"] == -32002

    denied = c.call("spawn_op", connector=connector, op="no-such-op")
    assert denied["error"]["data"]["reason"] == "op_unknown", denied
    print("all methods ok")


if __name__ == "__main__":
    main()
