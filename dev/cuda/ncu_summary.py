#!/usr/bin/env python3
"""Sums the per-kernel gpu__time_duration of an `ncu --csv` log (scripts/cuda_device_run.sh
profile) by kernel name: python3 dev/cuda/ncu_summary.py $OUT/ncu-BDH-8k.csv"""
import collections
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
hdr, total, count = None, collections.OrderedDict(), collections.Counter()
for r in rows:
    if "Kernel Name" in r:
        hdr = r
        continue
    if hdr and len(r) == len(hdr):
        name = r[hdr.index("Kernel Name")].split("(")[0].split("<")[0].replace("void ", "")
        total[name] = total.get(name, 0.0) + float(r[hdr.index("Metric Value")].replace(",", ""))
        count[name] += 1
for name, ns in total.items():
    print(f"{name:40s} {count[name]:4d} launches {ns / 1e6:9.3f} ms")
