"""The test step: the installed dependency and the built program together."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(HERE, ".deps"))

import shout  # noqa: E402


class GreetTest(unittest.TestCase):
    def test_greets_loudly(self):
        out = subprocess.run(
            [os.path.join(HERE, "build", "greet"), "ci"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        self.assertEqual(shout.shout(out), "HELLO, CI!")


if __name__ == "__main__":
    unittest.main()
