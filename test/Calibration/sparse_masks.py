#!/usr/bin/env python3
"""Prints the streaming-head masks an artifact's generated code passes to
kiln_k_attention_sparse (the call's last argument but one, resolved through the
function's `int64_t vN = K;` constants): "<calls> <streaming heads>".

usage: sparse_masks.py MODEL.CPP
"""
import re
import sys

masks = []
consts = {}
for line in open(sys.argv[1]):
    if line and not line[0].isspace():
        consts = {}  # a new function: its own value names
    m = re.match(r"\s*int64_t (v\d+) = (-?\d+);", line)
    if m:
        consts[m.group(1)] = int(m.group(2))
    m = re.search(r"kiln_k_attention_sparse\(([^)]*)\);", line)
    if m:
        masks.append(consts[m.group(1).split(",")[-2].strip()])
print(len(masks), sum(bin(x & (2**64 - 1)).count("1") for x in masks))
