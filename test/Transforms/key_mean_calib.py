#!/usr/bin/env python3
"""Writes a small kiln-calibration file for the kiln-center-keys tests:
`layers.<l>.key.mean` F32 [width] = 0.5, 1.5, 2.5, ... for l < layers (plus
an attn_in tap so it looks like kiln-calibrate's output).

usage: key_mean_calib.py OUT --layers L --width W [--bad-shape] [--nan] [--huge]
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
ap.add_argument("--layers", type=int, default=1)
ap.add_argument("--width", type=int, default=8)
ap.add_argument("--bad-shape", action="store_true")
ap.add_argument("--nan", action="store_true")
ap.add_argument("--huge", action="store_true")
a = ap.parse_args()
meta = {"format": "kiln-calibration", "version": "1", "model": "test"}
tensors = {}
for l in range(a.layers):
    w = a.width + (1 if a.bad_shape else 0)
    mean = np.arange(w, dtype=np.float64) + 0.5
    if a.nan:
        mean[0] = np.nan
    tensors["layers.%d.key.absmax" % l] = np.abs(mean) + 1
    tensors["layers.%d.key.absmean" % l] = np.abs(mean)
    if a.huge:
        mean[0] = 1e30
    tensors["layers.%d.key.mean" % l] = mean
calib_file.write_calibration(a.out, meta, tensors)
