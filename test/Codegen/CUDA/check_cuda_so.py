#!/usr/bin/env python3
"""Reports what a CUDA model.so holds: device code per architecture (the
cubins and PTX that cuobjdump lists), the cuda_abi.h exports, and which Kiln
kernels were compiled in (from the host stubs nvcc generates for every
__global__ function)."""
import glob
import os
import re
import shutil
import subprocess
import sys


def find_cuobjdump():
    """cuobjdump on PATH, in the CUDA toolkit, or from PyPI's
    nvidia-cuda-cuobjdump (scripts/setup.sh installs it)."""
    exe = shutil.which("cuobjdump")
    if exe:
        return exe
    if os.access("/usr/local/cuda/bin/cuobjdump", os.X_OK):
        return "/usr/local/cuda/bin/cuobjdump"
    try:
        import nvidia
        for root in nvidia.__path__:
            for cand in sorted(glob.glob(os.path.join(root, "*", "bin",
                                                      "cuobjdump"))):
                return cand
    except ImportError:
        pass
    sys.exit("check_cuda_so.py: cuobjdump not found (pip install "
             "nvidia-cuda-cuobjdump)")


path = sys.argv[1]
tool = find_cuobjdump()
elf = subprocess.run([tool, "--list-elf", path], capture_output=True,
                     text=True).stdout
ptx = subprocess.run([tool, "--list-ptx", path], capture_output=True,
                     text=True).stdout
for arch in ("sm_80", "sm_90a"):
    print("%s: %s" % (arch, "yes" if re.search(r"\." + arch + r"\.cubin",
                                               elf) else "no"))
# cuobjdump names embedded PTX after its virtual architecture
# ("model.1.sm_90.ptx" for compute_90).
print("ptx: " + " ".join(sorted(set(re.findall(r"\.(sm_\w+|compute_\w+)\.ptx",
                                               ptx)))))
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
    "fused": r"fused(Gemv|Epilogue|Elementwise)Kernel<",
}
kernels = [op for op, pattern in sorted(stubs.items())
           if re.search(r"kiln_cuda_detail::" + pattern, syms)]
print("kernels: " + " ".join(kernels))
