"""An HTTP or HTTPS server for the network client tests (world.rs starts it
inside a test's world network namespace).

It serves the files under --root, and with --git-root the repositories
under it through `git http-backend` (as CGI) at /git/. Each request is
appended to --log as one line, "METHOD PATH HOST SNI", before it is
answered, so a test judges what reached the server from this file alone.
It prints "ready" on stdout once it listens. Standard library only.
"""

import argparse
import http.server
import os
import ssl
import subprocess
import threading
import urllib.parse

GIT_HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--git-root")
    p.add_argument("--cert")
    p.add_argument("--key")
    return p.parse_args()


class Handler(http.server.SimpleHTTPRequestHandler):
    args = None
    log_lock = threading.Lock()

    def __init__(self, *a, **kw):
        super().__init__(*a, directory=self.args.root, **kw)

    def record(self):
        sni = getattr(self.connection, "spawnd_sni", None) or "-"
        line = "%s %s %s %s\n" % (
            self.command,
            self.path,
            self.headers.get("Host", "-"),
            sni,
        )
        with self.log_lock, open(self.args.log, "a") as f:
            f.write(line)

    def do_GET(self):
        self.record()
        if self.args.git_root and self.path.startswith("/git/"):
            self.git()
        else:
            super().do_GET()

    def do_HEAD(self):
        self.record()
        super().do_HEAD()

    def do_POST(self):
        self.record()
        if self.args.git_root and self.path.startswith("/git/"):
            self.git()
        else:
            self.send_error(405)

    def request_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length)

    def git(self):
        """One request through git http-backend as a CGI program."""
        url = urllib.parse.urlsplit(self.path)
        body = self.request_body()
        env = {
            "GIT_PROJECT_ROOT": self.args.git_root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH": "/usr/bin:/bin",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": urllib.parse.unquote(url.path[len("/git"):]),
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "SERVER_PROTOCOL": "HTTP/1.0",
            "GATEWAY_INTERFACE": "CGI/1.1",
        }
        for header in ("Git-Protocol", "Content-Encoding"):
            value = self.headers.get(header)
            if value:
                env["HTTP_" + header.upper().replace("-", "_")] = value
        out = subprocess.run(
            [GIT_HTTP_BACKEND], input=body, env=env, capture_output=True
        ).stdout
        head, _, rest = out.partition(b"\r\n\r\n")
        if not rest and b"\n\n" in out:
            head, _, rest = out.partition(b"\n\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)

    def log_message(self, *a):
        pass


def main():
    args = parse_args()
    Handler.args = args
    server = http.server.ThreadingHTTPServer(("0.0.0.0", args.port), Handler)
    if args.cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)

        def remember_sni(sock, name, _context):
            sock.spawnd_sni = name

        context.sni_callback = remember_sni
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
