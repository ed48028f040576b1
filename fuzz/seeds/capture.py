#!/usr/bin/env python3
"""Captures real HTTP traffic for the fuzz seeds (docs/fuzzing.md, "Seeds").

    capture.py LISTEN_PORT UPSTREAM_PORT OUT.jsonl

A TCP relay on 127.0.0.1:LISTEN_PORT to 127.0.0.1:UPSTREAM_PORT (a running
`subtask serve`); every exchange is parsed (Content-Length and chunked
bodies, so SSE streams too) and appended to OUT.jsonl as one line
{"request": {method, path, headers, body}, "response": {status, headers, body}}.
Point a client at LISTEN_PORT; stop with Ctrl-C or SIGTERM.
"""

import json
import socket
import sys
import threading


def read_head(buf, sock):
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, buf
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head, rest


def parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0]
    headers = []
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.append([k.strip(), v.strip()])
    return first, headers


def header(headers, name):
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


class Reader:
    """Reads HTTP messages from a socket, relaying every byte to `out`."""

    def __init__(self, sock, out):
        self.sock, self.out, self.buf = sock, out, b""

    def more(self):
        chunk = self.sock.recv(65536)
        if chunk:
            self.out.sendall(chunk)
        return chunk

    def need(self, n):
        while len(self.buf) < n:
            c = self.more()
            if not c:
                raise EOFError
            self.buf += c

    def line(self):
        while b"\r\n" not in self.buf:
            c = self.more()
            if not c:
                raise EOFError
            self.buf += c
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def message(self):
        while b"\r\n\r\n" not in self.buf:
            c = self.more()
            if not c:
                raise EOFError
            self.buf += c
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        first, headers = parse_head(head)
        body = b""
        if (header(headers, "transfer-encoding") or "").lower() == "chunked":
            while True:
                size = int(self.line().split(b";")[0], 16)
                if size == 0:
                    self.line()
                    break
                self.need(size + 2)
                body += self.buf[:size]
                self.buf = self.buf[size + 2:]
        else:
            n = int(header(headers, "content-length") or 0)
            self.need(n)
            body, self.buf = self.buf[:n], self.buf[n:]
        return first, headers, body


def relay(client, upstream_port, out_path, lock):
    server = socket.create_connection(("127.0.0.1", upstream_port))
    requests = Reader(client, server)
    responses = Reader(server, client)
    try:
        while True:
            first, headers, body = requests.message()
            method, path, _ = first.split(" ", 2)
            status_line, rheaders, rbody = responses.message()
            record = {
                "request": {"method": method, "path": path, "headers": headers,
                            "body": body.decode("utf-8", "replace")},
                "response": {"status": int(status_line.split(" ")[1]), "headers": rheaders,
                             "body": rbody.decode("utf-8", "replace")},
            }
            with lock, open(out_path, "a") as f:
                f.write(json.dumps(record) + "\n")
    except (EOFError, OSError, ValueError):
        pass
    finally:
        client.close()
        server.close()


def main():
    listen_port, upstream_port, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    lock = threading.Lock()
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", listen_port))
    ls.listen(64)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=relay, args=(c, upstream_port, out_path, lock), daemon=True).start()


if __name__ == "__main__":
    main()
