#!/usr/bin/env python3
"""A minimal connector runtime on spawnd_client: what an agent's tool layer
does with spawnd.

    connector_runtime.py CONNECTOR                     lists its operations and their params
    connector_runtime.py CONNECTOR OP [KEY=VALUE]...   runs one, streaming its output

Options: --socket PATH (default $SPAWND_SOCKET, else /run/spawnd/spawnd.sock),
--stdin-file FILE (streamed to the program in chunks), --follow notify|read
(output as notifications, the default, or by reading the streams), --timeout-ms N.

Exits with the program's code (128+N after signal N), or 3 when the gate
refused, printing the reason, the fix and the audit record's id.
"""

import argparse
import sys
import threading
from typing import BinaryIO, List, Optional

from spawnd_client import (
    STDERR,
    STDOUT,
    CapabilityDenied,
    Client,
    Connector,
    CredentialError,
    NotFound,
    SpawnExitedNote,
    SpawnOutputNote,
    SpawndError,
    SpawnStatus,
)


def list_operations(client: Client, name: str) -> int:
    status = client.connectors_status()
    connector: Optional[Connector] = status.connectors.get(name)
    if connector is None or connector.disabled:
        # A disabled connector is neither offered nor mentioned (seed 003).
        print(f"no connector {name} is available", file=sys.stderr)
        return 6
    print(f"{name}: {connector.status}")
    for op in connector.operations:
        print(f"  {op.name} ({op.mode}){': ' + op.description if op.description else ''}")
        for p in op.params:
            rule = "required" if p.required else (f"default {p.default!r}" if p.default is not None else "optional")
            extra = f", pattern /{p.pattern}/" if p.pattern else ""
            extra += f", one of {'|'.join(p.values)}" if p.values else ""
            print(f"    {p.name} ({p.kind}, {rule}{extra}){': ' + p.description if p.description else ''}")
    return 0


def follow_notifications(client: Client, handle: str) -> SpawnStatus:
    for note in client.notifications(handle):
        if isinstance(note, SpawnOutputNote):
            out = sys.stdout if note.which == STDOUT else sys.stderr
            if note.skipped:
                print(f"[{note.skipped} bytes missed]", file=sys.stderr)
            out.buffer.write(note.data)
            out.flush()
        elif isinstance(note, SpawnExitedNote):
            return note.status
    raise RuntimeError("the notifications ended without spawn_exited")


def follow_reads(client: Client, handle: str) -> SpawnStatus:
    def copy(which: int, out: BinaryIO) -> None:
        for chunk in client.iter_output(handle, which):
            out.write(chunk.data)
            out.flush()

    err = threading.Thread(target=copy, args=(STDERR, sys.stderr.buffer))
    err.start()
    copy(STDOUT, sys.stdout.buffer)
    err.join()
    return client.wait(handle)


def run_operation(client: Client, args: argparse.Namespace) -> int:
    params = dict(kv.split("=", 1) for kv in args.args)
    try:
        spawned = client.spawn_op(
            args.connector,
            args.op,
            params,
            stdin_stream=args.stdin_file is not None,
            notify=args.follow == "notify",
            timeout_ms=args.timeout_ms,
            label="connector_runtime example",
        )
    except (CapabilityDenied, CredentialError, NotFound) as e:
        d = e.denial
        if d is None:
            print(f"refused: {e.message}", file=sys.stderr)
            return 6
        print(f"denied ({d.reason}): {d.message}", file=sys.stderr)
        print(f"audit record: {d.audit_id}", file=sys.stderr)
        return 3
    if args.stdin_file is not None:
        # Fed beside the output: a program may write before it reads it all.
        def feed() -> None:
            try:
                with open(args.stdin_file, "rb") as f:
                    client.write_stdin(spawned.handle, f)
            except (OSError, SpawndError) as e:
                print(f"stdin: {e}", file=sys.stderr)

        threading.Thread(target=feed, daemon=True).start()
    status = follow_notifications(client, spawned.handle) if args.follow == "notify" else follow_reads(client, spawned.handle)
    client.spawn_release(spawned.handle)
    print(f"[{status.state} exit_code={status.exit_code} audit_id={status.audit_id}]", file=sys.stderr)
    if status.exit_code is not None:
        return status.exit_code
    return 128 + (status.signal or 0) if status.signal else 124


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket")
    ap.add_argument("--stdin-file")
    ap.add_argument("--follow", choices=["notify", "read"], default="notify")
    ap.add_argument("--timeout-ms", type=int)
    ap.add_argument("connector")
    ap.add_argument("op", nargs="?")
    ap.add_argument("args", nargs="*", metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    with Client(args.socket) as client:
        if args.op is None:
            return list_operations(client, args.connector)
        return run_operation(client, args)


if __name__ == "__main__":
    sys.exit(main())
