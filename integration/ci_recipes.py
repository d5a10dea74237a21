#!/usr/bin/env python3
"""Reads docs/ci.md and prints its recipes as JSON, for integration/ci_recipes.rs.

Each recipe is the fenced block after a `<!-- recipe: NAME -->` line. Shell
blocks are printed as text (their list indentation removed); YAML blocks are
parsed (PyYAML) and printed as the CI system would read them: GitHub's jobs
with their ordered steps, GitLab's job with its scripts and artifact paths.
"""
import json
import re
import sys
import textwrap

import yaml


def blocks(text):
    pattern = re.compile(
        r"^[ \t]*<!-- recipe: ([a-z]+) -->\n([ \t]*)```(\w+)\n(.*?)^\2```",
        re.M | re.S,
    )
    for m in pattern.finditer(text):
        name, lang, body = m.group(1), m.group(3), textwrap.dedent(m.group(4))
        yield name, lang, body


def main(path):
    out = {}
    for name, lang, body in blocks(open(path, encoding="utf-8").read()):
        if lang == "yaml":
            out[name] = yaml.safe_load(body)
        else:
            out[name] = body
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
