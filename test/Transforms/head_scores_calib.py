#!/usr/bin/env python3
"""Writes a small kiln-calibration file with head scores, as
`kiln-calibrate --heads` does, for the kiln-sparse-attention head-role tests:
metadata head_layers = L and, per layer l < L, `layers.<l>.attn_retrieval`
F32 [heads] = the scores given (the same row for every layer unless
--per-layer).

usage: head_scores_calib.py OUT --scores S0,S1,... [--layers L]
                            [--no-head-layers] [--per-layer S;S;...]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "reference"))
import calib_file  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--scores", default="")
ap.add_argument("--layers", type=int, default=1)
ap.add_argument("--no-head-layers", action="store_true")
ap.add_argument("--per-layer", default="")
a = ap.parse_args()
meta = {"format": "kiln-calibration", "version": "1", "model": "test",
        "heads_ctx": "2047", "heads_window": "128"}
if not a.no_head_layers:
    meta["head_layers"] = str(a.layers)
rows = ([r for r in a.per_layer.split(";")] if a.per_layer
        else [a.scores] * a.layers)
tensors = {}
for l, row in enumerate(rows):
    tensors["layers.%d.attn_retrieval" % l] = np.array(
        [float(x) for x in row.split(",")], dtype=np.float64)
calib_file.write_calibration(a.out, meta, tensors)
