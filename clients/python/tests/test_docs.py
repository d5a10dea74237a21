"""Every example of README.md runs against the daemon, and so does the
example connector runtime, so that neither drifts from the client."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

from .support import CONNECTOR, SOCKET

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(HERE, "README.md")
# The repository's page on its clients shows examples of this README.
CLIENTS_DOC = os.path.join(HERE, "..", "..", "docs", "clients.md")
RUNTIME = os.path.join(HERE, "examples", "connector_runtime.py")
DOC_CONNECTOR = "local://test/escape"
TIMEOUT_S = 120


def fenced_blocks(text):
    """(language, code) of each fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)


def environment():
    env = dict(os.environ, SPAWND_SOCKET=SOCKET)
    # `python3` in the shell examples is the interpreter that has the
    # package installed (the suite's own).
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    return env


def run(argv, **kw):
    return subprocess.run(argv, env=environment(), capture_output=True, timeout=TIMEOUT_S, **kw)


class ReadmeExamples(unittest.TestCase):
    def test_the_clients_page_shows_examples_of_this_readme(self):
        with open(README) as f:
            readme = f.read()
        with open(CLIENTS_DOC) as f:
            shown = [code for lang, code in fenced_blocks(f.read()) if lang == "python"]
        self.assertTrue(shown, "docs/clients.md shows no Python example")
        for code in shown:
            self.assertIn(code, readme, "a docs/clients.md example that this README (and so the suite) does not have")

    def test_every_fenced_example_runs(self):
        with open(README) as f:
            blocks = fenced_blocks(f.read())
        ran = 0
        for lang, code in blocks:
            code = code.replace(DOC_CONNECTOR, CONNECTOR)
            with self.subTest(example=code.splitlines()[0]):
                if lang == "python":
                    # From an empty directory: the package must come from
                    # the installation, not from the source tree.
                    with tempfile.TemporaryDirectory() as cwd:
                        done = run([sys.executable, "-c", code], cwd=cwd)
                elif lang == "sh":
                    done = run(["bash", "-euo", "pipefail", "-c", code], cwd=HERE)
                else:
                    self.assertEqual(lang, "", "a fenced block in a language the suite does not run")
                    self.assertNotIn("spawnd_client", code, "an example the suite does not run")
                    continue
                ran += 1
                self.assertEqual(
                    done.returncode, 0,
                    f"README example failed:\n{code}\n--- stdout\n{done.stdout.decode()}\n--- stderr\n{done.stderr.decode()}",
                )
        self.assertGreaterEqual(ran, 8)


class ConnectorRuntimeExample(unittest.TestCase):
    def runtime(self, *args, cwd=None):
        return run([sys.executable, RUNTIME, "--socket", SOCKET, *args], cwd=cwd)

    def test_it_lists_the_operations_and_their_params(self):
        done = self.runtime(CONNECTOR)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(b"  sh (readonly)", done.stdout)
        self.assertIn(b"    script (string, required)", done.stdout)

    def test_it_runs_an_operation_and_exits_with_its_code(self):
        for follow in ("read", "notify"):
            with self.subTest(follow=follow):
                done = self.runtime("--follow", follow, CONNECTOR, "sh", "script=echo out; echo err >&2; exit 7")
                self.assertEqual(done.returncode, 7, done.stderr)
                self.assertEqual(done.stdout, b"out\n")
                self.assertIn(b"err\n", done.stderr)
                self.assertIn(b"[exited exit_code=7", done.stderr)

    def test_it_feeds_a_file_to_stdin(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"line\n" * 50_000)
            f.flush()
            done = self.runtime("--follow", "read", "--stdin-file", f.name, CONNECTOR, "sh", "script=wc -l")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.strip(), b"50000")

    def test_it_reports_a_denial_with_its_audit_id(self):
        done = self.runtime(CONNECTOR, "sh", "script=-x")
        self.assertEqual(done.returncode, 3)
        self.assertIn(b"denied (option_injection)", done.stderr)
        self.assertRegex(done.stderr.decode(), r"audit record: \w+")


if __name__ == "__main__":
    unittest.main()
