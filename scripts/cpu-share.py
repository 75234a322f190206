#!/usr/bin/env python3
"""Cores used by named processes and the kernel, sampled from /proc.

    scripts/cpu-share.py [--every 0.2] [--skip 50] [--span 30] NAME...

Waits for a process of each NAME (its comm) to appear, samples every
--every seconds until one exits, and prints one line per sample, all in
cores: each process's CPU time (user and system), and the whole machine's
system and idle time (summed over its CPUs). At the end it prints the mean
over the samples from --skip seconds after the start, for --span seconds
(all if 0). The fleet figures (docs/FLEETSIM.md) used it alongside scripts/fleet-run.sh:

    scripts/cpu-share.py --skip 30 --span 60 hubd fleetsim > cpu.txt &
    scripts/fleet-run.sh configs/fleetsim-steady.yaml \
        --devices 10000 --duration 100s
"""
import argparse
import os
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def find(name):
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/comm") as f:
                    if f.read().strip() == name:
                        return p
            except OSError:
                pass
    return None


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def machine():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[2], v[3]  # system, idle


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=float, default=0.2)
    ap.add_argument("--skip", type=float, default=0)
    ap.add_argument("--span", type=float, default=0)
    ap.add_argument("names", nargs="+")
    a = ap.parse_args()
    pids = {}
    while len(pids) < len(a.names):
        for n in a.names:
            if n not in pids and (p := find(n)):
                pids[n] = p
        if len(pids) < len(a.names):
            time.sleep(0.1)
    start = time.time()
    prev = {n: ticks(p) for n, p in pids.items()}
    psys, pidle = machine()
    sums, count = {}, 0
    while True:
        time.sleep(a.every)
        try:
            cur = {n: ticks(p) for n, p in pids.items()}
        except OSError:
            break
        sys_, idle = machine()
        dt = a.every * HZ
        row = {n: (cur[n] - prev[n]) / dt for n in pids}
        row["system"], row["idle"] = (sys_ - psys) / dt, (idle - pidle) / dt
        el = time.time() - start
        print(f"{el:7.1f}s " + "  ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
        if el >= a.skip and (a.span == 0 or el < a.skip + a.span):
            count += 1
            for k, v in row.items():
                sums[k] = sums.get(k, 0) + v
        prev, psys, pidle = cur, sys_, idle
    if count:
        print("mean cores " + "  ".join(f"{k} {v / count:.2f}" for k, v in sums.items()))
    else:
        print("no samples in the window", file=sys.stderr)


if __name__ == "__main__":
    main()
