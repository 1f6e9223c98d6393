#!/usr/bin/env python3
"""Faults injected into `smelt launch` runs from outside (bench/launch/run sets SMELT, WORK, LOG).

Part 1: per fault kind, one fault at step 40 of a 2-rank run; the seconds from the fault to its
detection and to the first step after the restart, from launch.json's Unix times.
Part 2: the same run with a fault every K seconds (kinds in turn) beside the run with none:
goodput (time on kept steps / wall time) and the wall time each took.
"""
import json
import os
import signal
import subprocess
import sys
import time

SMELT = os.environ["SMELT"]
WORK = os.environ["WORK"]
LOG = open(os.environ.get("LOG", "/dev/null"), "a")
STEPS = int(os.environ.get("STEPS", "300"))
SAVE_EVERY = int(os.environ.get("SAVE_EVERY", "20"))
TIMEOUT_S = float(os.environ.get("TIMEOUT_S", "10"))
STALL_S = float(os.environ.get("STALL_S", "20"))
BACKOFF = float(os.environ.get("BACKOFF", "1"))
EVERY = [float(x) for x in os.environ.get("EVERY", "30 60").split()]
MPI = "--allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none"

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


def last_step(run):
    last = -1
    try:
        with open(os.path.join(run, "metrics.jsonl")) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if isinstance(j, dict) and "event" not in j and "step" in j:
                    last = j["step"]
    except OSError:
        pass
    return last


def ranks_of(run):
    """rank -> pid of the ranks training in `run` now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = open(f"/proc/{name}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            if " train " not in cmd or (run + " ") not in cmd or cmd.startswith("mpirun") or "launch " in cmd:
                continue
            env = open(f"/proc/{name}/environ", "rb").read().split(b"\0")
            stat = open(f"/proc/{name}/stat").read()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2] == "Z":
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                out[int(e.split(b"=", 1)[1])] = int(name)
    return out


def inject(kind, ranks):
    if kind == "kill":
        os.kill(ranks[1], signal.SIGKILL)
    elif kind == "hang":
        os.kill(ranks[1], signal.SIGSTOP)
    elif kind == "stall":
        for p in ranks.values():
            os.kill(p, signal.SIGSTOP)


def launch(run):
    with open(os.path.join(WORK, "run.toml"), "w") as f:
        f.write(CONFIG)
    cmd = [SMELT, "launch", "--np", "2", "--launcher", "mpirun", "--launcher-args", MPI, "--backoff", str(BACKOFF),
           "--backoff-max", str(4 * BACKOFF), "--stall-timeout", str(STALL_S), "--grace", "5", "--max-restarts", "50",
           "--", SMELT, "train", "--config", os.path.join(WORK, "run.toml"), "--data", os.path.join(WORK, "tokens"),
           "--run-dir", run]
    return subprocess.Popen(cmd, stdout=LOG, stderr=LOG)


def supervised(name, plan):
    """plan(t_since_start, step, injected) -> kind or None. Returns (launch.json, [(kind, unix time)])."""
    run = os.path.join(WORK, name)
    p = launch(run)
    t0 = time.time()
    injected, hit = [], set()
    while p.poll() is None:
        time.sleep(0.01)
        ranks = ranks_of(run)
        if len(ranks) != 2 or set(ranks.values()) & hit:
            continue
        kind = plan(time.time() - t0, last_step(run), injected)
        if kind:
            inject(kind, ranks)
            injected.append((kind, time.time()))
            hit |= set(ranks.values())
    with open(os.path.join(run, "launch.json")) as f:
        return json.load(f), injected


def part1():
    print("fault at step 40 of a 2-rank run (dist.timeout_s %g, --stall-timeout %g, back-off %g s, checkpoint every %d steps)"
          % (TIMEOUT_S, STALL_S, BACKOFF, SAVE_EVERY))
    print("%-8s %-8s %10s %10s %12s %10s %10s" % ("fault", "cause", "detect s", "restart s", "fault->step s", "steps lost",
                                                 "lost s"))
    for kind in ("kill", "hang", "stall"):
        lj, inj = supervised("one-" + kind, lambda t, s, done, k=kind: k if s >= 40 and not done else None)
        if not lj["restarts"] or not inj:
            print("%-8s no restart recorded (outcome %s)" % (kind, lj["outcome"]))
            continue
        r, t_inj = lj["restarts"][0], inj[0][1]
        det = r["detected_time"] - t_inj
        back = r.get("back_time", float("nan")) - t_inj
        print("%-8s %-8s %10.2f %10.2f %12.2f %10d %10.2f" % (kind, r["cause"], det, back - det, back, r["steps_lost"],
                                                             r["lost_s"]))
    print()


def part2():
    base, _ = supervised("none", lambda t, s, done: None)
    print("goodput of %d steps: no faults %.3f (%.1f s wall)" % (STEPS, base["goodput"], base["wall_s"]))
    kinds = ["kill", "hang"]
    for every in EVERY:
        def plan(t, s, done, every=every):
            if t < every * (len(done) + 1) or s < 5:
                return None
            return kinds[len(done) % len(kinds)]
        lj, inj = supervised("every-%g" % every, plan)
        print("  a fault every %g s: %d restarts, goodput %.3f, %.1f s wall (%.2fx the run without faults), outcome %s"
              % (every, len(lj["restarts"]), lj["goodput"], lj["wall_s"], lj["wall_s"] / base["wall_s"], lj["outcome"]))


if __name__ == "__main__":
    part1()
    part2()
    sys.stdout.flush()
