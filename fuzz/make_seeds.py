#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the hand-made seeds of fuzz/corpus/<target>/ (seed-*): one valid
input per message kind, from the wire formats in docs/TCP_PROVIDER.md,
docs/BOOTSTRAP.md and the headers they cite. Campaigns add what they find
beside them."""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# tcp wire frames: 48-byte header (magic, version 3, type, flags, msn, ack_msn, length, rkey, addr, arg0, arg1).
RKEY = b"RKEY"
ADDR = b"@ADDR@@@"


def frame(ftype, flags=0, msn=0, ack=0, length=0, rkey=b"\0\0\0\0", addr=b"\0" * 8, arg0=0, arg1=0, payload=b""):
    return (struct.pack("<IBBHIII", 0x58444D52, 3, ftype, flags, msn, ack, length) + rkey + addr +
            struct.pack("<QQ", arg0, arg1) + payload)


FIRST, LAST, ACKNOW, IMM, ACKVALID = 1, 2, 4, 8, 16
write("tcp_frames", "send", frame(2, FIRST | LAST | ACKNOW, 0, length=16, arg0=16, payload=b"s" * 16))
write("tcp_frames", "send-imm", frame(2, FIRST | LAST | IMM, 0, length=8, arg0=8, arg1=0xABCD, payload=b"i" * 8))
write("tcp_frames", "write", frame(3, FIRST | LAST | ACKNOW, 0, length=64, rkey=RKEY, addr=ADDR, arg0=64,
                                   payload=bytes(range(64))))
write("tcp_frames", "write-two-chunks",
      frame(3, FIRST, 0, length=32, rkey=RKEY, addr=ADDR, arg0=64, payload=b"a" * 32) +
      frame(3, LAST, 0, length=32, rkey=RKEY, addr=ADDR, arg0=0, payload=b"b" * 32))
write("tcp_frames", "read", frame(4, ACKNOW, 0, rkey=RKEY, addr=ADDR, arg0=128))
write("tcp_frames", "fetch-add", frame(5, ACKNOW, 0, rkey=RKEY, addr=ADDR, arg0=5))
write("tcp_frames", "cmp-swap", frame(11, ACKNOW, 0, rkey=RKEY, addr=ADDR, arg0=0, arg1=9))
write("tcp_frames", "ack-request", frame(6))
write("tcp_frames", "sequence",
      frame(2, FIRST | LAST, 0, length=4, arg0=4, payload=b"one!") +
      frame(3, FIRST | LAST, 1, length=8, rkey=RKEY, addr=ADDR, arg0=8, payload=b"two!two!") +
      frame(4, ACKNOW, 2, rkey=RKEY, addr=ADDR, arg0=8) + frame(12))

# The TCP store, version 3: requests after the proof; the client's answer to request 2.
def store_request(op, rid, timeout, args):
    out = struct.pack("<IBBHQqI", 0x53584452, 3, op, 0, rid, timeout, len(args))
    for a in args:
        out += struct.pack("<I", len(a)) + a
    return out


write("store_server", "set-get", store_request(2, 1, -1, [b"key", b"value"]) + store_request(3, 2, 100, [b"key"]))
write("store_server", "wait-add", store_request(4, 3, 100, [b"a", b"b"]) + store_request(5, 4, -1, [b"n", struct.pack("<q", 3)]))
write("store_server", "cas-check-remove",
      store_request(7, 5, -1, [b"c", b"", b"x"]) + store_request(8, 6, -1, [b"c"]) + store_request(6, 7, -1, [b"c"]))
write("store_server", "hello", store_request(1, 1, -1, []))


def store_response(status, rid, args):
    out = struct.pack("<IBBHQI", 0x53584452, 3, status, 0, rid, len(args))
    for a in args:
        out += struct.pack("<I", len(a)) + a
    return out


write("store_client", "value", store_response(0, 2, [b"value"]))
write("store_client", "timeout", store_response(1, 2, [b"k"]))
write("store_client", "stale-then-value", store_response(0, 1, [b"old"]) + store_response(0, 2, [b"v"]))
write("store_client", "invalid", store_response(2, 2, [b"not an integer"]))

# Launcher environments: "<variable index>=<value>" lines (fuzz/launcher_env.cpp's table).
write("launcher_env", "rdmx", b"\x00=1\n\x01=4\n\x04=127.0.0.1:29500\n")
write("launcher_env", "torchrun", b"\x05=0\n\x06=2\n\x07=0\n\x08=2\n\x09=10.0.0.1\n\x0a=29500\n")
write("launcher_env", "openmpi", b"\x0b=3\n\x0c=8\n\x0d=1\n\x0e=4\n\x04=file:/tmp/x\n")
write("launcher_env", "slurm", b"\x12=5\n\x13=16\n\x14=1\n\x09=node1\n\x0a=1234\n")
write("launcher_env", "mpich", b"\x0f=0\n\x10=2\n\x11=0\n\x04=host:1\n")

# Addresses: a tcp IPv4 and IPv6 address, an auto bundle of both, a rank placement record.
tcp4 = b"T\x01\x04\x00" + struct.pack(">H", 4242) + bytes([127, 0, 0, 1]) + b"\0" * 16 + struct.pack("<IQ", 3, 0x1122334455667788)
tcp6 = b"T\x01\x06\x00" + struct.pack(">H", 4242) + b"\0" * 15 + b"\x01" + struct.pack("<I", 0) + struct.pack("<IQ", 9, 1)
write("addresses", "tcp-v4", tcp4)
write("addresses", "tcp-v6", tcp6)
write("addresses", "tcp-hex", tcp4.hex().encode())
write("addresses", "rank-where", b"identity=host-a\nname=host-a\nboot_id=b0\ndevice=tcp:lo/127.0.0.1:1\nnuma=0\n")

# The collectives' header (48 bytes), progress block (64) and notice (256).
header = struct.pack("<QQQQIiHBBBBH", 1, 5, 1024, 0, 4096, -1, 0, 1, 5, 0, 1, 0)
progress = struct.pack("<QQQiBBBBQ", 5, 4, 1024, 0, 1, 5, 0, 1, 77) + b"\0" * 16 + struct.pack("<Q", 5)
notice = struct.pack("<IIQ", 1, 5, 5) + b"rank 1 called all_reduce".ljust(240, b"\0")
write("coll_header", "all-reduce", header + progress + notice)
write("coll_header", "broadcast", struct.pack("<QQQQIiHBBBBH", 2, 9, 7, 0, 7, 1, 0, 3, 8, 0, 4, 1))

# The shm HELLO (64 bytes) and the start of its segment; the first byte steers (fuzz/shm_hello.cpp).
hello = struct.pack("<II", 0x4F4C4548, 1) + b"\0" * 24 + struct.pack("<QII", 0, 4096, 0) + b"\0" * 16
write("shm_hello", "steered", bytes([0x0F]) + hello)
write("shm_hello", "named-bad-segment", bytes([0x01]) + hello)
write("shm_hello", "no-probe", bytes([0x07]) + hello)
write("shm_hello", "raw", bytes([0x00]) + hello + b"\x53\x4d\x44\x52\x01\0\0\0")
