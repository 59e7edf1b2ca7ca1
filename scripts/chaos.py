#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fault campaigns and the soak (docs/TESTING.md, "Faults").

Starts the ranks of a job of tests/chaos/chaos_worker.cpp itself (not under
`rdmx run`, which stops a job at its first failure), injects one fault, and
checks what every survivor reports and what the job leaves behind:

  kill       SIGKILL of a random rank at a random moment of the collectives:
             every survivor raises PeerFailure or Timeout naming the dead rank
             within RDMX_TIMEOUT + 1 s
  stop       SIGSTOP of a random rank: the others time out naming it
  partition  the link of one host of the multi-host bed goes down in the
             middle of the collectives: errors name unreachable peers
  store      the job's store server (a standalone rdmx_store) is killed while
             the ranks bootstrap: a clear error or a finished job, never a hang

The recover-* scenarios go on after the fault (the worker's --recover): the
survivors shrink(), run a correct collective within RDMX_TIMEOUT + 1 s of the
fault, agree on the same failed ranks and communicator, and grow back by as
many new processes (--join), which then compute with them. The store is a
file store apart from the ranks, as shrink() asks.

  recover-kill   SIGKILL of a random rank
  recover-kill2  SIGKILL of two random ranks at once
  recover-agree  SIGKILL of a rank, then of another while the survivors agree
  recover-stop   SIGSTOP of a random rank; once the others went on it is
                 continued, and must find itself left out and say so
  recover-cut    one host of two on the bed cut off, exactly half the ranks:
                 the side that wins the tie in the store goes on, the other
                 refuses (no split brain); no grow

After every run: no process of the job left, no socket file of it in the shm
directory, no new file in /dev/shm, no new listening port, no mapping of an
rdmx segment in any other process.

  scripts/chaos.py campaign --build build --runs 100 [--scenarios kill:shm,...]
  scripts/chaos.py soak --build build --minutes 60

Both print a table and write JSON (--out).
"""
import argparse
import json
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SLACK_S = 1.0  # the bound: RDMX_TIMEOUT + 1 s
SCENARIOS = ["kill:shm", "kill:tcp", "stop:shm", "stop:tcp", "store:bed", "partition:bed",
             "recover-kill:shm", "recover-kill:tcp", "recover-kill:bed", "recover-kill2:shm", "recover-kill2:tcp",
             "recover-kill2:bed", "recover-agree:shm", "recover-agree:tcp", "recover-agree:bed", "recover-stop:shm",
             "recover-stop:tcp", "recover-stop:bed", "recover-cut:bed"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_ports():
    ports = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A":
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def rdmx_mappings():
    """pid -> lines of /proc/pid/maps that map an rdmx segment."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                hits = [line.strip() for line in f if "rdmx" in line and "memfd:" in line]
        except OSError:
            continue
        if hits:
            found[int(pid)] = hits
    return found


def shm_dir():
    return os.environ.get("RDMX_SHM_DIR", f"/tmp/rdmx-shm-{os.getuid()}")


def shm_sockets_of(pids):
    try:
        names = os.listdir(shm_dir())
    except OSError:
        return []
    return [n for n in names if n.split("-", 1)[0].isdigit() and int(n.split("-", 1)[0]) in pids]


def dev_shm():
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


class Bed:
    """The multi-host bed of scripts/bed.sh: hosts are network namespaces."""

    def __init__(self, root, name, hosts):
        self.root, self.name, self.hosts = root, name, hosts

    def up(self):
        subprocess.run([f"{self.root}/scripts/bed.sh", "down", self.name], capture_output=True)
        subprocess.run([f"{self.root}/scripts/bed.sh", "up", self.name, str(self.hosts)], check=True,
                       capture_output=True)

    def down(self):
        subprocess.run([f"{self.root}/scripts/bed.sh", "down", self.name], capture_output=True)

    def ns(self, host):
        return f"rdmxb-{self.name}-h{host}"

    def ifname(self, host):
        return f"rb{self.name}h{host}"

    def ip(self, host):
        return f"10.203.0.{host + 1}"

    def link(self, host, up):
        subprocess.run(["ip", "-n", self.ns(host), "link", "set", self.ifname(host), "up" if up else "down"],
                       check=True)


class Rank:
    """One worker process: its events (JSON lines of its stdout file), pid (from its ready event) and exit status
    (written by its host's launcher)."""

    def __init__(self, rank, tmp):
        self.rank = rank
        self.out, self.err, self.rc = (os.path.join(tmp, f"rank{rank}.{x}") for x in ("out", "err", "rc"))
        self.events = []
        self._read_to = 0

    def poll_events(self):
        try:
            with open(self.out) as f:
                f.seek(self._read_to)
                text = f.read()
        except OSError:
            return
        complete = text[:text.rfind("\n") + 1]
        self._read_to += len(complete.encode())
        for line in complete.splitlines():
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def event(self, kind):
        self.poll_events()
        return next((e for e in self.events if e.get("event") == kind), None)

    @property
    def pid(self):
        ready = self.event("ready") or self.event("started")
        return ready["pid"] if ready else None

    def last(self, kind):
        self.poll_events()
        return next((e for e in reversed(self.events) if e.get("event") == kind), None)

    @property
    def returncode(self):
        try:
            with open(self.rc) as f:
                return int(f.read().strip() or "-1")
        except (OSError, ValueError):
            return None

    def signal(self, signo):
        if self.pid:
            try:
                os.kill(self.pid, signo)
            except ProcessLookupError:
                pass

    def stderr_tail(self, n=6):
        try:
            with open(self.err) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


class Job:
    """Ranks of the worker, `per_host` on each host of the bed (each host's ranks share a hostname and their own
    shm socket directory, as scripts/bed.sh run gives them) or all on this machine."""

    def __init__(self, args, n, provider, worker_args, bed=None, per_host=None, store=None, key=None, tmp=None):
        self.timeout_s = args.timeout
        self.worker = args.worker
        self.args, self.provider, self.bed, self.tmp = args, provider, bed, tmp
        self.ranks = [Rank(r, tmp) for r in range(n)]
        self.joiners = []
        per_host = per_host or (n // bed.hosts if bed else n)
        hosts = (n + per_host - 1) // per_host
        self.key = key or secrets.token_hex(24)
        self.store = store or f"{bed.ip(0) if bed else '127.0.0.1'}:{free_port()}"
        self.launchers = []
        for h in range(hosts):
            ranks = range(h * per_host, min(n, (h + 1) * per_host))
            self._launch(h, f"h{h}", [(self.ranks[r], {"RDMX_RANK": r, "RDMX_WORLD_SIZE": n,
                                                      "RDMX_LOCAL_RANK": r - h * per_host,
                                                      "RDMX_LOCAL_WORLD_SIZE": len(ranks)}) for r in ranks],
                         worker_args)

    def _launch(self, host, name, ranks, worker_args):
        """Starts `ranks` ((Rank, its own variables) pairs) as one host of the job: on the bed, in host `host`'s
        namespace under the hostname bed-<bed>-<name> with a shm directory of its own."""
        lines = ["set -u"]
        if self.bed:
            shm = shm_dir()
            lines += [f"hostname bed-{self.bed.name}-{name}", f"mkdir -p {shm}",
                      f"mount -t tmpfs -o mode=0700 rdmx-chaos-{self.bed.name}-{name} {shm} || exit 2"]
        for rank, own in ranks:
            env = dict(own, RDMX_STORE=self.store, RDMX_PROVIDER=self.provider, RDMX_TIMEOUT=f"{self.args.timeout}s",
                       RDMX_AUTH_KEY=self.key, RDMX_SOCKET_IFNAME=self.bed.ifname(host) if self.bed else "lo",
                       RDMX_DEBUG=os.environ.get("RDMX_DEBUG", "WARN"),
                       DIE_FILE=os.path.join(self.tmp, "die-while-agreeing"))
            cmd = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items())
            cmd += " " + " ".join(shlex.quote(x) for x in [self.worker] + worker_args)
            lines.append(f"({cmd} > {rank.out} 2> {rank.err}; echo $? > {rank.rc}) &")
        lines.append("wait")
        argv = ["bash", "-c", "\n".join(lines)]
        if self.bed:
            argv = ["ip", "netns", "exec", self.bed.ns(host), "unshare", "--uts"] + argv
        self.launchers.append(subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL,
                                               stderr=open(os.path.join(self.tmp, f"{name}.err"), "w")))

    def add_joiners(self, count, worker_args):
        """Starts `count` new processes that join the running job (rdmx_chaos_worker --join); on the bed each is a
        host of its own in host 0's namespace."""
        for _ in range(count):
            joiner = Rank(len(self.ranks) + len(self.joiners), self.tmp)
            self.joiners.append(joiner)
            self._launch(0, f"j{joiner.rank}", [(joiner, {})], ["--join"] + worker_args)

    def pids(self):
        return {r.pid for r in self.ranks + self.joiners if r.pid} | {p.pid for p in self.launchers}

    def wait_ready(self, bound_s):
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            if all(r.event("ready") for r in self.ranks):
                return True
            if any(r.returncode is not None for r in self.ranks):
                return False
            time.sleep(0.01)
        return False

    def wait_for(self, ranks, deadline):
        """Waits until `ranks` exit or the monotonic `deadline`; returns the ones still running."""
        while time.monotonic() < deadline and any(r.returncode is None for r in ranks):
            time.sleep(0.02)
        return [r.rank for r in ranks if r.returncode is None]

    def wait_exit(self, ranks, bound_s):
        """Waits for `ranks` to exit; kills every rank still running after `bound_s`. Returns the hung ones."""
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline and any(r.returncode is None for r in ranks):
            time.sleep(0.02)
        hung = [r.rank for r in ranks if r.returncode is None]
        killed = [r for r in self.ranks + self.joiners if r.returncode is None]
        for r in killed:
            r.signal(signal.SIGCONT)
            r.signal(signal.SIGKILL)
        for p in self.launchers:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for r in self.ranks + self.joiners:
            r.poll_events()
        if killed:
            # What rdmx run does after killing ranks: what they could not close goes.
            subprocess.run([self.worker, "--remove-stale"], capture_output=True)
        return hung


def names_rank(event, dead):
    """Whether the error names rank `dead`: as its peer, as "rank D", or in a list "ranks A, B and D"."""
    message = event.get("message", "")
    if event.get("peer_rank") == dead or re.search(rf"\brank {dead}\b", message):
        return True
    for listed in re.findall(r"\branks ((?:\d+(?:, | and |,? and ))*\d+)", message):
        if dead in {int(x) for x in re.findall(r"\d+", listed)}:
            return True
    return False


def error_delays(event, t_fault_ns):
    """Seconds from the fault to the error, and from the moment the rank needed the lost peer (the later of the
    fault and its entry into the collective that failed) to the error."""
    since_fault = (event["mono_ns"] - t_fault_ns) / 1e9
    since_need = (event["mono_ns"] - max(t_fault_ns, event.get("op_start_ns", 0))) / 1e9
    return since_fault, since_need


def judge_survivors(job, survivors, dead_ranks, t_fault_ns, timeout_s, expect_codes):
    """Outcome of one run for the survivors: ('ok', (worst since the fault, worst since needed)) or
    (problem, detail). A survivor may go on with collectives that need nothing of the lost peer (shm writes
    straight into a stopped process's memory); the bound RDMX_TIMEOUT + 1 s holds from when it needs it."""
    worst = (0.0, 0.0)
    for r in survivors:
        e = r.event("error")
        if r.event("wrong_result"):
            return "wrong_result", json.dumps(r.event("wrong_result"))
        if e is None:
            done = r.event("done")
            return ("finished" if done else "no_error"), f"rank {r.rank}: exit {r.returncode}\n{r.stderr_tail()}"
        since_fault, since_need = error_delays(e, t_fault_ns)
        worst = (max(worst[0], since_fault), max(worst[1], since_need))
        if e["code"] not in expect_codes:
            return "wrong_code", f"rank {r.rank}: {e['code']}: {e['message']}"
        if not any(names_rank(e, d) for d in dead_ranks):
            return "unnamed", f"rank {r.rank} does not name rank(s) {sorted(dead_ranks)}: {e['message']}"
        if since_need > timeout_s + SLACK_S:
            return "late", f"rank {r.rank} after {since_need:.2f} s ({since_fault:.2f} s after the fault): {e['message']}"
    return "ok", worst


def check_leaks(job, extra_pids, before_ports, before_shm, before_maps):
    leaks = []
    pids = job.pids() | set(extra_pids)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X"):
                leaks.append(f"process {pid} still running")
        except OSError:
            pass
    sockets = shm_sockets_of(pids)
    if sockets:
        leaks.append(f"shm socket files left: {sockets}")
    new_shm = dev_shm() - before_shm
    if new_shm:
        leaks.append(f"new /dev/shm files: {sorted(new_shm)}")
    new_ports = listening_ports() - before_ports
    if new_ports:
        leaks.append(f"new listening ports: {sorted(new_ports)}")
    maps = {p: m for p, m in rdmx_mappings().items() if p not in before_maps}
    if maps:
        leaks.append(f"rdmx mappings in other processes: {maps}")
    return leaks


def judge_recovery(job, dead, t_fault_ns, timeout_s, grown):
    """Outcome of a run that recovers: every rank left ends with the same communicator, of everyone but `dead` (and
    the processes that joined, when `grown`), after a correct collective within RDMX_TIMEOUT + 1 s of the last fault.
    Returns ('ok', (slowest recovery, slowest grow, connections kept, connections there were)) or (problem, detail)."""
    survivors = [r for r in job.ranks if r.rank not in dead]
    want_size = len(job.ranks) - len(dead) + (len(job.joiners) if grown else 0)
    members, worst_recovery, worst_grow, kept, possible = None, 0.0, 0.0, 0, 0
    for r in survivors + (job.joiners if grown else []):
        if r.event("wrong_result"):
            return "wrong_result", json.dumps(r.event("wrong_result"))
        done = r.event("done")
        if done is None:
            said = r.event("refused") or r.event("error")
            return "not_recovered", f"rank {r.rank}: exit {r.returncode}: {json.dumps(said)}\n{r.stderr_tail()}"
        if done["size"] != want_size:
            return "wrong_size", f"rank {r.rank} ended with {done['size']} ranks, not {want_size}"
        if r.rank >= len(job.ranks):
            continue
        if sorted(done["failed"]) != sorted(dead):
            return "disagree", f"rank {r.rank} counts {done['failed']} failed, not {sorted(dead)}"
        shrunk = r.last("shrunk")
        if members is None:
            members = shrunk["members"]
        elif shrunk["members"] != members:
            return "disagree", f"rank {r.rank}'s communicator is {shrunk['members']}, another's {members}"
        kept += shrunk["kept"]
        possible += len(shrunk["members"]) - 1
        recovered = r.last("recovered")
        seconds = (recovered["mono_ns"] - t_fault_ns) / 1e9
        if seconds > timeout_s + SLACK_S:
            return "late", f"rank {r.rank} recovered {seconds:.2f} s after the fault"
        worst_recovery = max(worst_recovery, seconds)
        if grown:
            growing, grew = r.last("growing"), r.last("grown")
            worst_grow = max(worst_grow, (grew["mono_ns"] - growing["mono_ns"]) / 1e9)
    return "ok", (worst_recovery, worst_grow, kept, possible)


def judge_refused(ranks, timeout_s):
    """The ranks of the side that may not go on: each says so (refused, or an error naming its peers), none goes
    on."""
    for r in ranks:
        if r.event("done") or r.event("recovered"):
            return "split_brain", f"rank {r.rank} went on: {json.dumps(r.last('shrunk'))}"
        if r.event("wrong_result"):
            return "wrong_result", json.dumps(r.event("wrong_result"))
        if not (r.event("refused") or r.event("error")):
            return "silent", f"rank {r.rank}: exit {r.returncode}\n{r.stderr_tail()}"
    return "ok", None


def run_recovery(args, kind, provider, rng, bed, tmp):
    """One run of a recover-* scenario: the ranks shrink() after the fault and go on, then (except after a cut)
    grow back by as many new processes."""
    before_ports, before_shm, before_maps = listening_ports(), dev_shm(), rdmx_mappings()
    on_bed = provider == "bed"
    n = rng.choice([4, 6, 8]) if kind != "recover-cut" else bed.hosts * rng.choice([2, 3, 4])
    seed = rng.randrange(1 << 30)
    grow = kind != "recover-cut"
    common = ["--seed", str(seed), "--max-bytes", str(args.max_bytes), "--recover", "--after", "20"]
    # A standalone store, as shrink() asks: a file store survives any rank, and both sides of a cut reach it.
    store_dir = os.path.join(tmp, "store")
    os.mkdir(store_dir)
    job = Job(args, n, "auto" if on_bed else provider, ["--seconds", "120"] + common + (["--grow"] if grow else []),
              bed=bed if on_bed else None, store=f"file:{store_dir}", tmp=tmp)
    if not job.wait_ready(args.timeout + 20):
        job.wait_exit([], 0)
        return "no_start", "\n".join(r.stderr_tail() for r in job.ranks), [], n
    time.sleep(rng.uniform(0.05, 0.8))  # a random moment of the random collectives
    bound = args.timeout + SLACK_S + 10

    if kind == "recover-cut":
        per_host = n // bed.hosts
        host = rng.randrange(1, bed.hosts)
        cut = set(range(host * per_host, (host + 1) * per_host))
        t_fault = time.monotonic_ns()
        bed.link(host, False)
        hung = job.wait_exit(job.ranks, bound)
        bed.link(host, True)
        if hung:
            outcome, detail = "hang", f"ranks {hung} did not exit"
        else:
            # Exactly half on each side: the side that wins the tie in the store goes on, the other refuses.
            went_on = [side for side in (cut, set(range(n)) - cut)
                       if any(job.ranks[r].event("done") for r in side)]
            if len(went_on) != 1:
                outcome, detail = "split_brain" if went_on else "nobody_went_on", \
                    "; ".join(f"rank {r.rank}: {json.dumps(r.last('refused') or r.last('error'))}" for r in job.ranks)
            else:
                lost = set(range(n)) - went_on[0]
                outcome, detail = judge_recovery(job, lost, t_fault, args.timeout, False)
                if outcome == "ok":
                    refused, why = judge_refused([job.ranks[r] for r in lost], args.timeout)
                    if refused != "ok":
                        outcome, detail = refused, why
        leaks = check_leaks(job, [], before_ports, before_shm, before_maps)
        return outcome, detail, leaks, n

    victims = rng.sample(range(n), 2 if kind == "recover-kill2" else 1)
    if kind == "recover-agree":
        second = rng.choice([r for r in range(n) if r != victims[0]])
        with open(os.path.join(tmp, "die-while-agreeing"), "w") as f:
            f.write(str(second))
    t_fault = time.monotonic_ns()
    for v in victims:
        job.ranks[v].signal(signal.SIGSTOP if kind == "recover-stop" else signal.SIGKILL)
    if kind == "recover-agree":
        # A second rank dies while the survivors agree on the first: it kills
        # itself 1 ms into its own shrink() (the worker reads DIE_FILE). A
        # kill sent from here came too late once a shrink of 8 ranks took
        # 8-14 ms, and a death in the grow that follows is not this scenario.
        deadline = time.monotonic() + args.timeout + SLACK_S
        while time.monotonic() < deadline and job.ranks[second].returncode is None:
            time.sleep(0.001)
        agreeing = job.ranks[second].event("agreeing")
        t_fault = agreeing["mono_ns"] if agreeing else time.monotonic_ns()
        victims.append(second)
    survivors = [r for r in job.ranks if r.rank not in victims]
    # As many new processes as ranks were lost, once the survivors make room for them.
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline and any(r.returncode is None for r in survivors):
        growing = max((e["count"] for r in survivors for e in r.events if e.get("event") == "growing"), default=0)
        if growing > len(job.joiners):
            job.add_joiners(growing - len(job.joiners), common)
        time.sleep(0.002)
        for r in survivors:
            r.poll_events()
    hung = job.wait_for(survivors + job.joiners, deadline)
    if hung:
        outcome, detail = "hang", f"ranks {hung} did not exit"
    else:
        outcome, detail = judge_recovery(job, set(victims), t_fault, args.timeout, True)
    if kind == "recover-stop" and outcome == "ok":
        # The stopped rank, let go after the others went on without it, finds itself left out.
        stopped = job.ranks[victims[0]]
        stopped.signal(signal.SIGCONT)
        if job.wait_for([stopped], time.monotonic() + args.timeout + SLACK_S + 5):
            outcome, detail = "hang", f"the stopped rank {stopped.rank} did not exit once continued"
        else:
            outcome, why = judge_refused([stopped], args.timeout)
            if outcome != "ok":
                detail = why
    job.wait_exit([], 0)
    leaks = check_leaks(job, [], before_ports, before_shm, before_maps)
    return outcome, detail, leaks, n


def run_once(args, scenario, rng, bed, tmp):
    kind, provider = scenario.split(":")
    if kind.startswith("recover-"):
        return run_recovery(args, kind, provider, rng, bed, tmp)
    before_ports, before_shm, before_maps = listening_ports(), dev_shm(), rdmx_mappings()
    extra_pids = []
    store_proc = None
    n = rng.choice([4, 6, 8]) if kind != "partition" else bed.hosts * rng.choice([2, 3, 4])
    seed = rng.randrange(1 << 30)
    if kind == "store":
        # The store server on host 1 of the bed, every rank on host 0 (a store on one of rank 0's own
        # addresses is served by rank 0 itself).
        key = secrets.token_hex(24)
        store_proc = subprocess.Popen(["ip", "netns", "exec", bed.ns(1), args.store, "--host", bed.ip(1), "--port", "0"],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True, env=dict(os.environ, RDMX_AUTH_KEY=key))
        extra_pids.append(store_proc.pid)
        port = None
        deadline = time.monotonic() + 10
        while port is None and time.monotonic() < deadline:
            m = re.search(r"serving on \S*:(\d+)", store_proc.stdout.readline())
            if m:
                port = int(m.group(1))
        job = Job(args, n, "auto", ["--iterations", "40", "--seed", str(seed)], bed=bed, per_host=n,
                  store=f"{bed.ip(1)}:{port}", key=key, tmp=tmp)
        time.sleep(rng.uniform(0.0, 0.4))  # a random moment of the ranks' bootstrap (or of their first collectives)
        t_fault = time.monotonic_ns()
        store_proc.kill()
        store_proc.wait()
        hung = job.wait_exit(job.ranks, args.timeout + SLACK_S + 5)
        outcome, detail = "ok", (0.0, 0.0)
        if hung:
            outcome, detail = "hang", f"ranks {hung} did not exit"
        else:
            for r in job.ranks:
                e = r.event("error")
                if r.event("wrong_result"):
                    outcome, detail = "wrong_result", json.dumps(r.event("wrong_result"))
                elif e is None and not r.event("done"):
                    outcome, detail = "no_error", f"rank {r.rank}: exit {r.returncode}\n{r.stderr_tail()}"
                elif e is not None:
                    since_fault, seconds = error_delays(e, t_fault)
                    detail = (max(detail[0], since_fault), max(detail[1], seconds))
                    clear = e["code"] in ("peer failure", "timeout") and (
                        "store" in e["message"] or re.search(r"\branks? \d+", e["message"]))
                    if not clear:
                        outcome, detail = "unclear", f"rank {r.rank}: {e['code']}: {e['message']}"
                    elif seconds > args.timeout + SLACK_S:
                        outcome, detail = "late", f"rank {r.rank} after {seconds:.2f} s: {e['message']}"
                if outcome != "ok":
                    break
        leaks = check_leaks(job, extra_pids, before_ports, before_shm, before_maps)
        return outcome, detail, leaks, n

    job = Job(args, n, provider if kind != "partition" else "auto",
              ["--seconds", "120", "--seed", str(seed), "--max-bytes", str(args.max_bytes)], bed=bed if kind == "partition" else None, tmp=tmp)
    if not job.wait_ready(args.timeout + 20):
        job.wait_exit([], 0)
        return "no_start", "\n".join(r.stderr_tail() for r in job.ranks), [], n
    time.sleep(rng.uniform(0.05, 0.8))  # a random moment of the random collectives
    if kind == "partition":
        host = rng.randrange(1, bed.hosts)
        per_host = n // bed.hosts
        cut = set(range(host * per_host, (host + 1) * per_host))
        t_fault = time.monotonic_ns()
        bed.link(host, False)
        hung = job.wait_exit(job.ranks, args.timeout + SLACK_S + 5)
        bed.link(host, True)
        outcome, detail = "ok", (0.0, 0.0)
        if hung:
            outcome, detail = "hang", f"ranks {hung} did not exit"
        else:
            inside = [r for r in job.ranks if r.rank in cut]
            outside = [r for r in job.ranks if r.rank not in cut]
            worst = (0.0, 0.0)
            for group, unreachable in ((outside, cut), (inside, set(range(n)) - cut)):
                outcome, detail = judge_survivors(job, group, unreachable, t_fault, args.timeout,
                                                  ("peer failure", "timeout"))
                if outcome != "ok":
                    break
                worst = (max(worst[0], detail[0]), max(worst[1], detail[1]))
            if outcome == "ok":
                detail = worst
        leaks = check_leaks(job, extra_pids, before_ports, before_shm, before_maps)
        return outcome, detail, leaks, n

    victim = rng.randrange(n)
    target = job.ranks[victim]
    t_fault = time.monotonic_ns()
    target.signal(signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
    survivors = [r for r in job.ranks if r.rank != victim]
    hung = job.wait_exit(survivors, args.timeout + SLACK_S + 5)
    if hung:
        outcome, detail = "hang", f"ranks {hung} did not exit"
    else:
        outcome, detail = judge_survivors(job, survivors, {victim}, t_fault, args.timeout, ("peer failure", "timeout"))
    leaks = check_leaks(job, extra_pids, before_ports, before_shm, before_maps)
    return outcome, detail, leaks, n


def kept_text(detail):
    return f", kept {detail[2]} of {detail[3]} connections"


def median_recovery(row):
    times = sorted(t[0] for t in row.get("times_s", []))
    return f"{times[len(times) // 2]:.2f}" if times else "-"


def print_table(rows, timeout_s, columns):
    """A Markdown table of campaign rows: scenario, ranks, runs, outcomes, then `columns` ((title, cell(name, row))
    pairs), then leaks."""
    if not rows:
        return
    titles = ["scenario", "ranks", "runs", "outcomes"] + [title for title, _ in columns] + ["leaks"]
    print(f"\n| {' | '.join(titles)} |  (RDMX_TIMEOUT {timeout_s} s)")
    print("|" + "---|" * len(titles))
    for scenario, row in rows.items():
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row["outcomes"].items()))
        cells = [scenario, ",".join(map(str, row["ranks"])), str(row["runs"]), outcomes]
        cells += [cell(scenario, row) for _, cell in columns] + [str(len(row["leaks"]))]
        print(f"| {' | '.join(cells)} |")


def campaign(args):
    rng = random.Random(args.seed)
    results = {}
    bed = None
    scenarios = args.scenarios.split(",")
    if any(s.endswith(":bed") for s in scenarios):
        if os.geteuid() != 0:
            print("chaos: skipping the :bed scenarios (the bed's network namespaces need root)")
            scenarios = [s for s in scenarios if not s.endswith(":bed")]
        else:
            bed = Bed(args.root, "chaos", 2)
            bed.up()
    failed = False
    try:
        for scenario in scenarios:
            recovering = scenario.startswith("recover-")
            # A recovery run's second figure is its grow back; a failure run's, the delay once needed.
            second = "slowest_grow_s" if recovering else "longest_since_needed_s"
            row = {"runs": 0, "outcomes": {}, "longest_since_fault_s": 0.0, second: 0.0, "leaks": [], "problems": [],
                   "ranks": set()}
            if recovering:
                row.update(kept=0, connections=0)
            for i in range(args.runs):
                tmp = tempfile.mkdtemp(prefix="rdmx-chaos-")
                outcome, detail, leaks, n = run_once(args, scenario, rng, bed, tmp)
                if outcome != "ok" and args.keep:
                    detail = f"{detail} (the ranks' output: {tmp})"
                else:
                    shutil.rmtree(tmp, ignore_errors=True)
                row["runs"] += 1
                row["ranks"].add(n)
                row["outcomes"][outcome] = row["outcomes"].get(outcome, 0) + 1
                if outcome == "ok":
                    row["longest_since_fault_s"] = max(row["longest_since_fault_s"], detail[0])
                    row[second] = max(row[second], detail[1])
                    row["times_s"] = row.get("times_s", []) + [detail[:2]]
                    if recovering:
                        row["kept"] += detail[2]
                        row["connections"] += detail[3]
                else:
                    row["problems"].append(f"run {i}: {outcome}: {detail}")
                row["leaks"] += [f"run {i}: {leak}" for leak in leaks]
                if args.verbose:
                    print(f"{scenario} run {i}: {n} ranks, {outcome}, "
                          f"{detail if outcome != 'ok' else f'{detail[0]:.2f} s, {detail[1]:.2f} s'}"
                          f"{kept_text(detail) if outcome == 'ok' and recovering else ''}"
                          f"{', leaks: ' + '; '.join(leaks) if leaks else ''}", flush=True)
            row["ranks"] = sorted(row["ranks"])
            results[scenario] = row
            failed |= bool(row["problems"] or row["leaks"])
    finally:
        if bed:
            bed.down()
    print_table({k: v for k, v in results.items() if not k.startswith("recover-")}, args.timeout, [
        ("longest to error, from the fault (s)", lambda k, row: f"{row['longest_since_fault_s']:.2f}"),
        ("from when needed (s)", lambda k, row: f"{row['longest_since_needed_s']:.2f}")])
    print_table({k: v for k, v in results.items() if k.startswith("recover-")}, args.timeout, [
        ("recovery: fault to a correct collective on the shrunk communicator, median / slowest (s)",
         lambda k, row: f"{median_recovery(row)} / {row['longest_since_fault_s']:.2f}"),
        ("grow back, slowest (s)",
         lambda k, row: "-" if k.startswith("recover-cut") else f"{row['slowest_grow_s']:.2f}"),
        ("connections kept by shrink()", lambda k, row: f"{row['kept']} of {row['connections']}")])
    for scenario, row in results.items():
        for p in row["problems"][:5] + row["leaks"][:5]:
            print(f"{scenario}: {p}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"timeout_s": args.timeout, "results": results}, f, indent=1)
    return 1 if failed else 0


def soak(args):
    """8 ranks on two bed hosts (shm inside a host, tcp between), random collectives checked bit-exactly,
    resident memory and open descriptors of every rank sampled each minute."""
    bed = Bed(args.root, "soak", 2) if os.geteuid() == 0 else None
    if bed:
        bed.up()
    samples = []
    try:
        with tempfile.TemporaryDirectory(prefix="rdmx-soak-") as tmp:
            job = Job(args, 8, "auto", ["--seconds", str(args.minutes * 60), "--seed", str(args.seed),
                                       "--max-bytes", str(args.max_bytes)], bed=bed, tmp=tmp)
            start = time.monotonic()
            if not job.wait_ready(args.timeout + 20):
                print("soak: the ranks did not start:\n" + "\n".join(r.stderr_tail() for r in job.ranks))
                job.wait_exit([], 0)
                return 1
            next_sample = start
            while any(r.returncode is None for r in job.ranks):
                if time.monotonic() >= next_sample:
                    row = {"minute": round((time.monotonic() - start) / 60, 2), "rss_kib": [], "fds": []}
                    for r in job.ranks:
                        try:
                            with open(f"/proc/{r.pid}/status") as f:
                                rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
                            row["rss_kib"].append(rss)
                            row["fds"].append(len(os.listdir(f"/proc/{r.pid}/fd")))
                        except (OSError, StopIteration):
                            pass
                    samples.append(row)
                    print(f"soak: minute {row['minute']}: RSS {sum(row['rss_kib']) // 1024} MiB, "
                          f"fds {sum(row['fds'])}", flush=True)
                    next_sample += args.sample_seconds
                time.sleep(0.5)
            hung = job.wait_exit(job.ranks, args.timeout + 10)
            done = [r.event("done") for r in job.ranks]
            wrong = [r.event("wrong_result") for r in job.ranks if r.event("wrong_result")]
            errors = [r.event("error") for r in job.ranks if r.event("error")]
    finally:
        if bed:
            bed.down()
    warm = [s for s in samples if s["minute"] >= args.warmup_minutes] or samples
    rss0, rss1 = sum(warm[0]["rss_kib"]), sum(warm[-1]["rss_kib"])
    fd0, fd1 = sum(warm[0]["fds"]), sum(warm[-1]["fds"])
    growth_rss = (rss1 - rss0) / rss0 * 100 if rss0 else 0.0
    growth_fd = (fd1 - fd0) / fd0 * 100 if fd0 else 0.0
    iterations = [d["iterations"] for d in done if d]
    summary = {"minutes": args.minutes, "ranks": 8, "placement": "2 bed hosts x 4" if bed else "one host",
               "iterations": iterations[0] if iterations else 0, "wrong_results": len(wrong), "errors": errors,
               "hung": hung, "rss_mib_after_warmup": [rss0 // 1024, rss1 // 1024], "rss_growth_pct": round(growth_rss, 2),
               "fds_after_warmup": [fd0, fd1], "fd_growth_pct": round(growth_fd, 2), "samples": samples}
    print(json.dumps({k: v for k, v in summary.items() if k != "samples"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
    ok = not wrong and not errors and not hung and len(iterations) == 8 and growth_rss < 5 and growth_fd < 5
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["campaign", "soak"])
    parser.add_argument("--build", default="build")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--timeout", type=float, default=3.0, help="RDMX_TIMEOUT of the ranks, seconds")
    parser.add_argument("--max-bytes", type=int, default=1 << 20)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--warmup-minutes", type=float, default=5)
    parser.add_argument("--sample-seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the ranks' output of runs that fail")
    args = parser.parse_args()
    args.root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args.worker = os.path.join(args.build, "tests", "rdmx_chaos_worker")
    args.store = os.path.join(args.build, "tools", "rdmx_store")
    for path in (args.worker, args.store):
        if not os.access(path, os.X_OK):
            sys.exit(f"chaos: {path} is missing: build first (make build)")
    sys.exit(campaign(args) if args.mode == "campaign" else soak(args))


if __name__ == "__main__":
    main()
