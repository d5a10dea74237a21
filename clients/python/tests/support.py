"""What the suites against a real daemon share: the socket and the test
connector from the environment (integration/clients.rs sets both), and the
bounds of waits. Only lower bounds are tight; every upper bound is generous."""

import os
import sys

SOCKET = os.environ.get("SPAWND_SOCKET", "")
CONNECTOR = os.environ.get("SPAWND_CONNECTOR", "")
if not SOCKET or not CONNECTOR:
    sys.exit("the suite needs SPAWND_SOCKET and SPAWND_CONNECTOR (integration/clients.rs sets them)")

#: How long a test waits for something that should take milliseconds.
PATIENCE_MS = 30_000
PATIENCE_S = PATIENCE_MS / 1000

BASH = "/usr/bin/bash"


def envelope(script: str, stdin=None):
    """A raw envelope the test connector allows: bash -c SCRIPT."""
    from spawnd_client import Envelope

    return Envelope(program=BASH, argv=["bash", "-c", script], env={}, stdin=stdin)
