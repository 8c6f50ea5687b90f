#!/usr/bin/env python3
"""Reports what a CUDA model.so holds: device code per architecture, the
cuda_abi.h exports, and which Kiln kernels were compiled in (from the host
stubs nvcc generates for every __global__ function)."""
import re
import subprocess
import sys

path = sys.argv[1]
data = open(path, "rb").read()
for arch in ("sm_80", "sm_90a"):
    print("%s: %s" % (arch, "yes" if arch.encode() in data else "no"))
dyn = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                     text=True, check=True).stdout
exports = sorted(m.group(1) for m in re.finditer(r" T (kiln_\w+)$", dyn, re.M))
print("exports: " + " ".join(exports))
syms = subprocess.run(["nm", "-C", path], capture_output=True, text=True,
                      check=True).stdout
# Host stubs of the __global__ functions each Kiln op launches.
stubs = {
    "embedding": r"embeddingKernel<",
    "rms_norm": r"rmsNormKernel<",
    "linear": r"gemvKernel<",
    "rope": r"ropeKernel<",
    "attention": r"attn(Prefill|DecodeSplit|DecodeReduce)Kernel<",
    "swiglu": r"elementwiseKernel<[^>]*SwigluOp",
}
kernels = [op for op, pattern in sorted(stubs.items())
           if re.search(r"kiln_cuda_detail::" + pattern, syms)]
print("kernels: " + " ".join(kernels))
