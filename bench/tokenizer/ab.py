#!/usr/bin/env python3
"""Interleaved A/B of `smelt tokenizer encode` builds against npm tiktoken, whole processes: each
round runs every smelt build and tiktoken once, in turn, so a busy machine slows all of them alike.
Prints per-command median / best wall and CPU (user+sys) seconds and each build's tiktoken ratio
(the median of the per-round ratios, and min-max). Not the full table: that is bench/tokenizer/run.
usage: ab.py ROUNDS TIKTOKEN_ENCODING RANK_FILE INPUT NAME=SMELT_BINARY...
  e.g. ab.py 10 gpt2 /tmp/tkb/fixtures/gpt2.tiktoken /tmp/tkb/en.txt before=build-a/smelt after=build/smelt"""
import os, resource, statistics, subprocess, sys, time

rounds, enc, ranks, text = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
here = os.path.dirname(os.path.abspath(__file__))
cmds = {name: [path, 'tokenizer', 'encode', '-t', ranks, '-i', text, '-o', '-', '--threads', '1']
        for name, path in (a.split('=', 1) for a in sys.argv[5:])}
cmds['tiktoken'] = ['node', os.path.join(here, 'peers.js'), 'tiktoken', enc, text]

def timed(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

walls = {n: [] for n in cmds}
cpus = {n: [] for n in cmds}
for _ in range(rounds):
    for n, c in cmds.items():
        w, u = timed(c)
        walls[n].append(w)
        cpus[n].append(u)
mb = os.path.getsize(text) / 1e6
print(f'{mb:.1f} MB, {rounds} rounds, load average {open("/proc/loadavg").read().split()[0]} at the end')
print(f'| {"command":10} | {"wall median":>11} | {"wall best":>9} | {"CPU median":>10} | {"MB/s (median)":>13} | {"x tiktoken: median (min-max)":>28} |')
print('|------------|-------------|-----------|------------|---------------|------------------------------|')
for n in cmds:
    x = '' if n == 'tiktoken' else (lambda r: f'{statistics.median(r):.1f} ({min(r):.1f}-{max(r):.1f})')(
        [t / s for t, s in zip(walls['tiktoken'], walls[n])])
    print(f'| {n:10} | {statistics.median(walls[n]):11.3f} | {min(walls[n]):9.3f} | {statistics.median(cpus[n]):10.3f} | '
          f'{mb / statistics.median(walls[n]):13.1f} | {x:>28} |')
