#!/usr/bin/env python3
"""A TLS front for a plain-HTTP server, for the HTTPS-upstream check:
`tls_relay.py CERT KEY TARGET_PORT` listens on an ephemeral loopback port,
prints it, terminates TLS and relays bytes to 127.0.0.1:TARGET_PORT."""

import socket
import ssl
import sys
import threading

cert, key, target = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(64)
print(srv.getsockname()[1], flush=True)


def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(conn):
    try:
        tls = ctx.wrap_socket(conn, server_side=True)
    except (ssl.SSLError, OSError):
        conn.close()
        return
    up = socket.create_connection(("127.0.0.1", target))
    threading.Thread(target=pipe, args=(tls, up), daemon=True).start()
    pipe(up, tls)


while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
