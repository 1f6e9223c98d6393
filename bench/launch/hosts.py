#!/usr/bin/env python3
"""Faults injected into `smelt launch --hosts` runs across 2 hosts made of Linux network
namespaces, 2 ranks each, MPI over real TCP (bench/launch/run sets SMELT, WORK, LOG; HOSTS=1).

The hosts: a hub namespace with a bridge br0 (10.77.0.254/24) where mpirun and the supervisor run;
host k is a namespace whose eth0 (10.77.0.k/24) is one end of a veth pair, the other end (vhK) on
br0. mpirun reaches a host through an rsh agent script (`AGENT HOST CMD...` runs CMD in HOST's
namespace). Needs root; without namespaces it prints why and exits 0.

Part 1: per fault kind, one fault at step 40 of the run (kill or stop of a rank on host 2, host 2's
link down, a full disk under the checkpoints); the seconds from the fault to its detection and to
training again, from launch.json's Unix times, the cause recorded and the ranks after the restart.
Part 2: the same run with a fault every K seconds (kill, stop, link in turn) beside the run with
none: goodput (time on kept steps / wall time) and the wall time each took.
"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import time

SMELT = os.environ["SMELT"]
WORK = os.environ["WORK"]
LOG = open(os.environ.get("LOG", "/dev/null"), "a")
STEPS = int(os.environ.get("STEPS", "120"))  # 200 took 17 min for the whole bench here (2 cores, 4 ranks)
SAVE_EVERY = int(os.environ.get("SAVE_EVERY", "20"))
TIMEOUT_S = float(os.environ.get("TIMEOUT_S", "10"))
STALL_S = float(os.environ.get("STALL_S", "20"))
BACKOFF = float(os.environ.get("BACKOFF", "1"))
PROBE_S = float(os.environ.get("PROBE_S", "5"))
EVERY = [float(x) for x in os.environ.get("EVERY", "40").split()]  # "": no part 2
KINDS = os.environ.get("KINDS", "kill stop link disk").split()  # part 1's faults
FAULT_STEP = 40
FREE_KIB = 256  # what the ballast leaves free on the run's file system
TMPFS = os.environ.get("TMPFS", "256m")  # a checkpoint of this model is 46 MB, keep_last 3 (+ one being written)

CONFIG = f"""[model]
vocab_size = 4096
d_model = 256
n_layers = 4
n_heads = 8
n_kv_heads = 4
ffn_hidden = 688
max_seq_len = 128
[data]
seq_len = 128
batch_size = 8
append_eod = false
[train]
steps = {STEPS}
threads = 1
[optim]
lr = 1e-3
warmup_steps = 20
[ckpt]
save_every = {SAVE_EVERY}
keep_last = 3
[dist]
timeout_s = {TIMEOUT_S}
"""

TAG = "smhb%d" % os.getpid()
HUB = TAG + "_hub"
NHOSTS = 2
SLOTS = 2
AGENT = os.path.join(WORK, TAG + "_agent.sh")
made = []  # namespaces made, in order
children = []  # supervisors started (Popen)


def host_ns(k):
    return "%s_h%d" % (TAG, k)


def host_tmp(k):
    return os.path.join(WORK, "%s_h%d.tmp" % (TAG, k))


def host_ip(k):
    return "10.77.0.%d" % k


def sh(cmd, check=True):
    r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (cmd, r.stdout.strip()))
    return r.stdout


def add_ns(ns):
    sh("ip netns add " + ns)
    made.append(ns)
    sh("ip -n %s link set lo up" % ns)


def make_hosts():
    add_ns(HUB)
    sh("ip -n {0} link add br0 type bridge && ip -n {0} addr add 10.77.0.254/24 dev br0 && ip -n {0} link set br0 up"
       .format(HUB))
    for k in range(1, NHOSTS + 1):
        ns = host_ns(k)
        add_ns(ns)
        sh("ip -n {h} link add vh{k} type veth peer name eth0 netns {ns} && ip -n {h} link set vh{k} master br0 && "
           "ip -n {h} link set vh{k} up && ip -n {ns} addr add {ip}/24 dev eth0 && ip -n {ns} link set eth0 up"
           .format(h=HUB, k=k, ns=ns, ip=host_ip(k)))
    with open(AGENT, "w") as f:
        f.write("#!/bin/sh\n# mpirun's rsh agent: HOST COMMAND... runs COMMAND in HOST's namespace\n"
                "h=$1; shift\ncase \"$h\" in\n")
        for k in range(1, NHOSTS + 1):
            f.write("  %s) ns=%s; tmp=%s;;\n" % (host_ip(k), host_ns(k), host_tmp(k)))
        # each host its own TMPDIR, as real hosts have their own /tmp: the namespaces share the
        # hostname and /tmp, and two Open MPI daemons creating the same session folder
        # (/tmp/ompi.HOSTNAME.UID/jf.N) at once made a start fail now and then ("File exists")
        f.write("  *) echo \"netns agent: unknown host $h\" >&2; exit 1;;\nesac\n"
                "mkdir -p \"$tmp\"\nexec ip netns exec \"$ns\" env TMPDIR=\"$tmp\" sh -c \"$*\"\n")
    os.chmod(AGENT, 0o755)


def cleanup():
    for p in children:  # a supervisor still running (Ctrl-C): end it and its job
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGTERM)
                p.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except OSError:
                    pass
    for ns in reversed(made):  # what still runs in our namespaces (a lost host's daemon), then the namespace
        sh("ip netns pids %s | xargs -r kill -9; ip netns del %s" % (ns, ns), check=False)
    made.clear()
    try:
        os.remove(AGENT)
    except OSError:
        pass
    for k in range(1, NHOSTS + 1):
        shutil.rmtree(host_tmp(k), ignore_errors=True)


def remove_stale():
    """Namespaces of an earlier run of this bench that died before its cleanup (smhbPID_...)."""
    for ns in sh("ip netns list", check=False).split():
        if not ns.startswith("smhb") or not ns[4:].split("_")[0].isdigit():
            continue
        pid = int(ns[4:].split("_")[0])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sh("ip netns pids %s | xargs -r kill -9; ip netns del %s" % (ns, ns), check=False)
        except OSError:
            pass


def ns_inode(ns):
    return os.stat("/run/netns/" + ns).st_ino


def read_metrics(path):
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if isinstance(j, dict):
            out.append(j)
    return out


def current(run):
    """(the newest step of the current attempt or -1, restart events so far): step lines after the
    last restart event only (an older attempt's lines stay in the file until the resume cuts them)."""
    last, restarts = -1, 0
    for j in read_metrics(os.path.join(run, "metrics.jsonl")):
        if j.get("event") == "restart":
            last, restarts = -1, restarts + 1
        elif "event" not in j and "step" in j:
            last = j["step"]
    return last, restarts


def ranks_of(cmd_run, skip):
    """rank -> (pid, host k) of the ranks training `cmd_run` now, pids in `skip` left out."""
    hosts = {ns_inode(host_ns(k)): k for k in range(1, NHOSTS + 1)}
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        try:
            cmd = open(f"/proc/{name}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            if " train " not in cmd or (cmd_run + " ") not in cmd or cmd.startswith("mpirun") or "launch " in cmd:
                continue
            env = open(f"/proc/{name}/environ", "rb").read().split(b"\0")
            stat = open(f"/proc/{name}/stat").read()
            net = os.stat(f"/proc/{name}/ns/net").st_ino
        except OSError:
            continue
        if stat[stat.rfind(")") + 2] == "Z":
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                out[int(e.split(b"=", 1)[1])] = (int(name), hosts.get(net, 0))
    return out


def launch_argv(run, config):
    mpi = ("--mca plm_rsh_agent %s --mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 "
           "--mca btl self,tcp --allow-run-as-root --oversubscribe" % AGENT)
    hosts = ",".join("%s:%d" % (host_ip(k), SLOTS) for k in range(1, NHOSTS + 1))
    return ["ip", "netns", "exec", HUB, SMELT, "launch", "--hosts", hosts, "--min-ranks", str(SLOTS),
            "--rejoin-after", "0", "--probe-timeout", str(PROBE_S), "--launcher", "mpirun", "--launcher-args", mpi,
            "--stall-timeout", str(STALL_S), "--backoff", str(BACKOFF), "--backoff-max", str(4 * BACKOFF),
            "--grace", "5", "--max-restarts", "50", "--", SMELT, "train", "--config", config,
            "--data", os.path.join(WORK, "tokens"), "--run-dir", run, "--save-every", str(SAVE_EVERY)]


def quote(w):
    return "'" + w.replace("'", "'\\''") + "'"


class Run:
    """One supervised run. With disk=True the supervisor runs in a mount namespace of its own whose
    MNT is a small tmpfs holding the run folder; `live` is that folder reached from here."""

    def __init__(self, name, disk=False):
        self.config = os.path.join(WORK, "hosts.toml")
        with open(self.config, "w") as f:
            f.write(CONFIG)
        self.disk = disk
        if not disk:
            self.run = os.path.join(WORK, name)
            self.p = subprocess.Popen(launch_argv(self.run, self.config), stdout=LOG, stderr=LOG)
            self.live = self.run
        else:
            mnt = os.path.join(WORK, name + "-mnt")
            self.saved = os.path.join(WORK, name)  # launch.json and metrics.jsonl copied out at the end
            os.makedirs(mnt, exist_ok=True)
            os.makedirs(self.saved, exist_ok=True)
            self.run = os.path.join(mnt, "run")
            inner = " ".join(quote(w) for w in launch_argv(self.run, self.config))
            script = ("mount -t tmpfs -o size={size} tmpfs {mnt} && mkdir {run} && {{ {inner}; rc=$?; "
                      "cp {run}/launch.json {run}/metrics.jsonl {saved}/; exit $rc; }}").format(
                size=TMPFS, mnt=quote(mnt), run=quote(self.run), inner=inner, saved=quote(self.saved))
            self.p = subprocess.Popen(["unshare", "--mount", "sh", "-c", script], stdout=LOG, stderr=LOG)
            self.mnt_live = "/proc/%d/root%s" % (self.p.pid, mnt)
            self.live = self.mnt_live + "/run"
        children.append(self.p)
        self.t0 = time.time()

    def result(self):
        path = os.path.join(self.saved if self.disk else self.run, "launch.json")
        with open(path) as f:
            return json.load(f)


def link(k, up):
    sh("ip -n %s link set vh%d %s" % (HUB, k, "up" if up else "down"))


def fill(r):
    """The run's tmpfs filled to FREE_KIB free by a ballast file; returns its path."""
    path = r.mnt_live + "/ballast"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        end, want = 0, None
        while True:  # the checkpoint writer may be writing meanwhile: grow it in steps, smaller on ENOSPC
            st = os.statvfs(r.mnt_live)
            left = st.f_bavail * st.f_frsize - FREE_KIB * 1024
            if left < 64 * 1024:
                break
            want = left if want is None else min(want, left)
            try:
                os.posix_fallocate(fd, end, want)
                end += want
            except OSError:
                want //= 2
    finally:
        os.close(fd)
    return path


def supervised(name, plan, disk=False):
    """plan(t_since_start, step, done, ranks) -> kind or None. Returns (launch.json, [(kind, unix time)])."""
    r = Run(name, disk)
    injected, hit = [], set()
    undo = None  # (restarts count to wait past, what to do): the link back up, the ballast removed
    while r.p.poll() is None:
        time.sleep(0.01)
        step, restarts = current(r.live)
        if undo and restarts > undo[0]:
            undo[1]()
            undo = None
        if undo or step < 0:
            continue
        ranks = ranks_of(r.run, hit)
        if not ranks:
            continue
        kind = plan(time.time() - r.t0, step, injected, ranks)
        if not kind:
            continue
        on2 = sorted(rk for rk, (_, k) in ranks.items() if k == 2)
        victim = ranks[on2[-1] if on2 else max(ranks)][0]  # a rank on host 2, else (host 2 left out) the last
        if not on2 and kind != "disk":
            # host 2 is not in this attempt (left out): its link or its ranks cannot end the job; a kill
            # of host 1's last rank does, and the restart after it takes host 2 back
            kind = "kill(h1)"
        if kind.startswith("kill"):
            os.kill(victim, signal.SIGKILL)
        elif kind == "stop":
            os.kill(victim, signal.SIGSTOP)
        elif kind == "link":
            link(2, False)
            undo = (restarts, lambda: link(2, True))
        elif kind == "disk":
            ballast = fill(r)
            undo = (restarts, lambda: os.remove(ballast))
        injected.append((kind, time.time()))
        hit |= {pid for pid, _ in ranks.values()}
    if undo:
        undo[1]()
    return r.result(), injected


def part1():
    print("fault at step %d of a %d-step run, 2 hosts x 2 ranks (dist.timeout_s %g, --stall-timeout %g, back-off %g s, "
          "--probe-timeout %g, checkpoint every %d steps)" % (FAULT_STEP, STEPS, TIMEOUT_S, STALL_S, BACKOFF, PROBE_S,
                                                               SAVE_EVERY))
    print()
    print("| fault | cause | detect s | restart s | fault->step s | ranks after | steps lost | hosts down |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for kind in KINDS:
        lj, inj = supervised("one-" + kind, lambda t, s, done, ranks, k=kind: k if s >= FAULT_STEP and not done else None,
                             disk=kind == "disk")
        if not lj["restarts"] or not inj:
            print("| %s | no restart recorded (outcome %s) | | | | | | |" % (kind, lj["outcome"]))
            continue
        t_inj = inj[0][1]
        after = [x for x in lj["restarts"] if x["detected_time"] >= t_inj]
        before = [x for x in lj["restarts"] if x["detected_time"] < t_inj]
        if before:  # a restart the bench did not cause (printed; the row is the fault's)
            print("|  | before the fault: %s | | | | | | |" % ", ".join("%s (%s)" % (x["cause"], x["detail"][:80])
                                                                       for x in before))
        if not after:
            print("| %s | no restart after the fault (outcome %s) | | | | | | |" % (kind, lj["outcome"]))
            continue
        r = after[0]
        det = r["detected_time"] - t_inj
        back = r.get("back_time", float("nan")) - t_inj
        down = "; ".join("%s (%s)" % (h["host"], h["why"]) for h in r.get("hosts_down", [])) or "none"
        print("| %s | %s | %.2f | %.2f | %.2f | %s | %d | %s |" % (kind, r["cause"], det, back - det, back,
                                                                  r.get("ranks", "?"), r["steps_lost"], down))
        later = ["%s->%s ranks" % (x["cause"], x.get("ranks", "?")) for x in after[1:]]
        if later or lj["outcome"] != "completed":
            print("|  | then: %s; outcome %s | | | | | | |" % (", ".join(later) or "-", lj["outcome"]))
        sys.stdout.flush()
    print()


def part2():
    if not EVERY:
        return
    base, _ = supervised("none", lambda t, s, done, ranks: None)
    print("| run | restarts (causes -> ranks) | goodput | wall s | x no faults | outcome |")
    print("|---|---|---:|---:|---:|---|")
    print("| no faults, %d steps | 0 | %.3f | %.1f | 1.00 | %s |" % (STEPS, base["goodput"], base["wall_s"],
                                                                  base["outcome"]))
    sys.stdout.flush()
    kinds = ["kill", "stop", "link"]
    for every in EVERY:
        def plan(t, s, done, ranks, every=every):
            if t < every * (len(done) + 1) or s < 5:
                return None
            return kinds[len(done) % len(kinds)]
        lj, inj = supervised("every-%g" % every, plan)
        def counted(words):
            out = []
            for w in words:
                if w not in out:
                    out.append(w)
            return ", ".join("%s %d" % (w, words.count(w)) for w in out)
        causes = counted(["%s->%s" % (x["cause"], x.get("ranks", "?")) for x in lj["restarts"]])
        print("| a fault every %g s (%s) | %d (%s) | %.3f | %.1f | %.2f | %s |"
              % (every, counted([k for k, _ in inj]), len(lj["restarts"]), causes, lj["goodput"], lj["wall_s"],
                 lj["wall_s"] / base["wall_s"], lj["outcome"]))
        sys.stdout.flush()


def main():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda *_: sys.exit(130))
    atexit.register(cleanup)
    if os.geteuid() != 0:
        print("hosts: skipped: network namespaces need root")
        return
    remove_stale()
    try:
        make_hosts()
    except (RuntimeError, OSError) as e:
        cleanup()
        print("hosts: skipped: cannot make the network namespaces (%s)" % e)
        return
    try:
        part1()
        part2()
    finally:
        cleanup()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
