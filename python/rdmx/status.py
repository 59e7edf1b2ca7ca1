"""A running torch job seen through its store: ``python -m rdmx status``.

Every rank of an rdmx process group writes a status record into the
group's store (docs/OBSERVING.md). Under torchrun or ``init_process_group``
with ``env://`` that store is torch's TCPStore at MASTER_ADDR:MASTER_PORT,
which speaks torch's protocol: this module reads it with torch's own client
and reports as ``rdmx status`` does for rdmx's stores. It only reads, so
the job never waits for it.
"""
# SPDX-License-Identifier: MIT
import argparse
import json
import os
import re
import sys
import time
from datetime import timedelta

from rdmx import _core

# "<prefix>/<tag>/status/<rank>", as the ranks write them.
STATUS_KEY = re.compile(r"(.*/)?status/[0-9]+")


def read_records(host, port, timeout_s=5.0):
    """The rank status records in the torch TCPStore at host:port, as JSON
    texts with their keys added as "key"."""
    import torch.distributed as dist

    store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    # A record removed between the listing and the read must not hold the reader.
    store.set_timeout(timedelta(seconds=1))
    records = []
    for key in sorted(store.list_keys()):
        if not STATUS_KEY.fullmatch(key) or not store.check([key]):
            continue
        try:
            raw = store.get(key)
        except RuntimeError:  # its communicator went away meanwhile
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            records.append(raw.decode("utf-8", "replace"))
            continue
        if isinstance(doc, dict):
            doc["key"] = key
            records.append(json.dumps(doc))
        else:
            records.append(raw.decode("utf-8", "replace"))
    return records


def job_status(host, port, timeout_s=5.0):
    """The rdmx.status/1 document (docs/schemas/status.schema.json) of the job whose store is at host:port."""
    return json.loads(_core.job_status_json(read_records(host, port, timeout_s), int(time.time() * 1000)))


def describe(document):
    """The document as text, as ``rdmx status`` prints it."""
    return _core.describe_job_status(json.dumps(document))


def split_address(text):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'"{text}" is not host:port (the job\'s MASTER_ADDR:MASTER_PORT)')
    return host.strip("[]"), int(port)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m rdmx status",
        description="A running torch job from its store (torch's TCPStore): each process group's ranks, their hosts "
        "and devices, the collective under way and who has not called it, seconds since each rank's progress and "
        "where it is, the slowest rank of the last collectives. For rdmx's own stores, run `rdmx status`.")
    parser.add_argument("address", nargs="?", help="the job's store, host:port (default: MASTER_ADDR:MASTER_PORT)")
    parser.add_argument("--json", action="store_true", help="print one JSON document per view (rdmx.status/1)")
    parser.add_argument("--watch", type=float, default=0, help="print a view every this many seconds")
    parser.add_argument("--count", type=int, default=0, help="with --watch: stop after this many views")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to reach the store")
    args = parser.parse_args(argv)
    address = args.address
    if address is None:
        if not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
            parser.error("which job? give host:port, or set MASTER_ADDR and MASTER_PORT")
        address = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    if args.watch and args.watch < 0.2:
        parser.error("--watch: at least 0.2 s between views")
    try:
        host, port = split_address(address)
    except ValueError as e:
        parser.error(str(e))
    view = 0
    while True:
        view += 1
        try:
            document = job_status(host, port, args.timeout)
        except (RuntimeError, OSError) as e:
            print(f"python -m rdmx status: cannot read the torch store at {address}: {e} (is the job running, and "
                  "is this its MASTER_ADDR:MASTER_PORT? an rdmx store (RDMX_STORE) is read with `rdmx status`)",
                  file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps(document))
        else:
            if args.watch:
                print(f"{chr(10) if view > 1 else ''}== {time.strftime('%H:%M:%S')} (view {view}, every "
                      f"{args.watch:g} s) ==")
            sys.stdout.write(describe(document))
        sys.stdout.flush()
        if not args.watch or (args.count and view >= args.count):
            return 0
        time.sleep(args.watch)
