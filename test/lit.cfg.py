# -*- Python -*-
# lit configuration for Kiln's regression tests.

import os
import shutil

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "KILN"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "reference"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%shared", config.kiln_shared_dir))
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(
    ("%reference", os.path.join(config.kiln_src_root, "test", "reference")))
config.substitutions.append(("%kiln_obj_root", config.kiln_obj_root))
config.substitutions.append(("%kiln_src_root", config.kiln_src_root))

llvm_config.use_default_substitutions()
llvm_config.with_system_environment(["HOME", "TMPDIR", "KILN_HOST_CXX",
                                     "ASAN_OPTIONS", "UBSAN_OPTIONS"])
llvm_config.with_environment("PATH", config.kiln_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.kiln_tools_dir, config.llvm_tools_dir]
# Tools this build did not make are taken from KILN_EXTRA_TOOLS_DIR (the
# ASan suites of scripts/test.sh use the release build's compiler).
_extra_tools = os.environ.get("KILN_EXTRA_TOOLS_DIR")
if _extra_tools:
    tool_dirs.append(_extra_tools)
    llvm_config.with_environment("PATH", _extra_tools, append_path=True)
tools = ["kiln-opt", "kiln-compile", "kiln-calibrate", "kiln-run", "kiln-bench", "kiln-eval",
         "kiln-gemv-bench", "kiln-attention-bench",
         "kiln-chat-render",
         "kiln-keygen", "kiln-weight-dump",
         "KilnImportTests", "kiln_runtime_tests", "kiln_rt_text_tests",
         "kiln-plan", "KilnPlanTests",
         "kiln-gpu-kernel-check", "kiln-serve"]
tools += ["kiln-fuzz-" + t for t in ("gguf", "hf", "llama2c", "tokbin", "tokjson",
                                      "tokenizer", "calibration", "artifact", "ir")]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# Tensor-parallel runs over Open MPI (runtime/src/comm/MpiBackend.cpp): tests
# that launch ranks require the backend library, its checker and mpirun, and
# launch through %mpirun: a local job, bounded by `timeout 60`, allowed to
# oversubscribe the cores, unbound, over shared memory only (single-copy off:
# containers often forbid the cross-process memory access CMA needs).
config.substitutions.append(("%comm_mpi_lib", os.path.join(
    config.kiln_obj_root, "lib", "libkiln_comm_mpi.so")))
config.substitutions.append(
    ("%mpirun", "timeout 60 mpirun --oversubscribe --bind-to none "
     "--mca btl self,vader --mca btl_vader_single_copy_mechanism none "
     "--mca pml ob1"))
if shutil.which("mpirun") and \
        os.path.exists(os.path.join(config.kiln_obj_root, "lib",
                                    "libkiln_comm_mpi.so")) and \
        os.path.exists(os.path.join(config.kiln_tools_dir,
                                    "kiln-comm-mpi-check")):
    config.available_features.add("mpi")
    llvm_config.add_tool_substitutions(["kiln-comm-mpi-check"], tool_dirs)
    # Test machines and containers often run as root.
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"

if shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"):
    config.available_features.add("nvcc")
if os.path.exists(os.path.join(config.kiln_tools_dir, "kiln-gpu-kernel-check")):
    config.available_features.add("kiln-cuda")
if os.environ.get("KILN_TEST_GPU") == "1":
    config.available_features.add("cuda-gpu")
if config.kiln_sanitizers in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("asan")
if config.kiln_fuzzers in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("libfuzzer")
# test/Chat compares with jinja2 under the python that runs %python.
import subprocess
if subprocess.run([config.python_executable, "-c", "import jinja2"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
    config.available_features.add("jinja2")
try:
    import numpy  # noqa: F401
    config.available_features.add("numpy")
except ImportError:
    pass
# kiln-serve is built where cpp-httplib is installed; its tests drive it
# with the OpenAI Python client and prometheus_client's parser.
if os.path.exists(os.path.join(config.kiln_tools_dir, "kiln-serve")) and \
        subprocess.run([config.python_executable, "-c",
                        "import openai, prometheus_client"],
                       stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL).returncode == 0:
    config.available_features.add("kiln-serve")
# PyPI gguf (gguf-py) in the Python that runs %python: test helpers that
# write GGUF files.
import subprocess
if subprocess.run([config.python_executable, "-c", "import gguf"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
    config.available_features.add("gguf-py")

# Intel AMX (runtime/src/cpu/AmxGemm.cpp runs the prefill GEMMs on it): the
# CPU flags Linux reports when both the CPU and the kernel support the tile
# state, and KILN_AMX not turning it off.
try:
    with open("/proc/cpuinfo") as _cpu:
        _flags = set()
        for _line in _cpu:
            if _line.startswith("flags"):
                _flags = set(_line.split(":", 1)[1].split())
                break
    if {"amx_tile", "amx_bf16", "avx512_bf16"} <= _flags and \
            os.environ.get("KILN_AMX") != "0":
        config.available_features.add("amx")
except OSError:
    pass

# SmoothQuant W8A8 artifacts need the int8-activation kernels
# (kiln_k_linear_w8a8 in the kernel ABI); tests that run them require this.
with open(os.path.join(config.kiln_src_root, "runtime", "include", "kiln_rt",
                       "kernel_abi.h")) as _abi:
    if "kiln_k_linear_w8a8" in _abi.read():
        config.available_features.add("w8a8-kernels")
