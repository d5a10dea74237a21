# The network benchmark's client (benches/network.rs), the same program in
# every way it measures: on the host, inside a sandbox through spawnd's
# relay, and through a CONNECT proxy named by HTTPS_PROXY.
#
#   python3 -c "$(cat net_client.py)" HOST SETUP_PORT BULK_PORT COUNT BYTES
#
# Opens COUNT connections to SETUP_PORT one after another (a few more first,
# not counted, to warm up), each timed from connect() to the first byte of
# the answer to a one-byte request; then one connection to BULK_PORT, timed
# from connect() until the server has sent BYTES and closed, with the CPU
# time this process used meanwhile (user + system, the kernel's work on its
# behalf included). Prints one JSON object: {"setup_ns": [...], "bulk_ns": N,
# "bulk_cpu_ns": N, "connections": N}, the last counting every connection
# opened.
import json
import os
import resource
import socket
import sys
import time

WARM_UP = 20

host = sys.argv[1]
setup_port, bulk_port, count, total = (int(a) for a in sys.argv[2:6])
proxy = os.environ.get("HTTPS_PROXY")
if proxy:
    proxy_host, proxy_port = proxy.removeprefix("http://").rstrip("/").rsplit(":", 1)
    proxy = (proxy_host, int(proxy_port))


def open_to(port):
    """A connection to host:port, through the proxy's CONNECT when one is
    named, as a client that honours HTTPS_PROXY makes it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if not proxy:
        s.connect((host, port))
        return s
    s.connect(proxy)
    authority = f"{host}:{port}"
    s.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    # The servers speak only after the request, so nothing past the
    # proxy's answer can arrive here.
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = s.recv(4096)
        if not chunk:
            sys.exit(f"the proxy closed during CONNECT: {answer!r}")
        answer += chunk
    if answer.split(b" ", 2)[1] != b"200":
        sys.exit(f"the proxy refused CONNECT: {answer!r}")
    return s


setup_ns = []
for i in range(WARM_UP + count):
    start = time.perf_counter_ns()
    s = open_to(setup_port)
    s.sendall(b"?")
    if s.recv(1) != b"!":
        sys.exit("the setup server did not answer")
    took = time.perf_counter_ns() - start
    s.close()
    if i >= WARM_UP:
        setup_ns.append(took)



def cpu_ns():
    """User + system CPU time of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return int((usage.ru_utime + usage.ru_stime) * 1e9)


buffer = bytearray(1 << 20)
cpu_start = cpu_ns()
start = time.perf_counter_ns()
s = open_to(bulk_port)
s.sendall(b"?")
received = 0
while True:
    n = s.recv_into(buffer)
    if n == 0:
        break
    received += n
bulk_ns = time.perf_counter_ns() - start
s.close()
bulk_cpu_ns = cpu_ns() - cpu_start
if received != total:
    sys.exit(f"bulk: {received} bytes of {total}")

connections = WARM_UP + count + 1
print(
    json.dumps(
        {
            "setup_ns": setup_ns,
            "bulk_ns": bulk_ns,
            "bulk_cpu_ns": bulk_cpu_ns,
            "connections": connections,
        }
    )
)
