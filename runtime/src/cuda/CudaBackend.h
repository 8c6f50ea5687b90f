//===- CudaBackend.h - libkiln_runtime's side of the CUDA executor -*- C++ -*-===//
//
// Compiled into libkiln_runtime.so without any CUDA header or library: finds
// libkiln_runtime_cuda.so next to libkiln_runtime.so (dladdr), dlopen()s it
// once per process, and wraps its C table (CudaExecutor.h) in Status values
// and an Executor.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CUDA_CUDABACKEND_H
#define KILN_RUNTIME_CUDA_CUDABACKEND_H

#include "base/Status.h"
#include "cuda/CudaExecutor.h"
#include "session/Executor.h"

#include <memory>
#include <string>

namespace kiln::rt {

/// A failed kiln_cudaexec_* call as a Status (its code and message).
Status cudaStatus(int32_t code, const kiln_cudaexec_error_t &err);

/// The serving engine's batched step on the device (CudaExecutor.h
/// stepper_*): a paged KV pool in device memory and kiln_step.
class CudaStepper {
public:
  CudaStepper(const kiln_cudaexec_api_t *api, kiln_cudaexec_stepper_t *s)
      : api_(api), stepper_(s) {}
  ~CudaStepper() { api_->stepper_release(stepper_); }
  CudaStepper(const CudaStepper &) = delete;
  CudaStepper &operator=(const CudaStepper &) = delete;

  /// Runs one step; `logits` is then float32[num_seqs, vocab] (host,
  /// valid until the next run).
  Status run(const kiln_cudaexec_step_t &step, const float *&logits) {
    kiln_cudaexec_error_t err{};
    return cudaStatus(api_->stepper_run(stepper_, &step, &logits, &err), err);
  }

private:
  const kiln_cudaexec_api_t *api_;
  kiln_cudaexec_stepper_t *stepper_;
};

/// One artifact's CUDA model: device weights and the cuBLASLt handle.
class CudaBackend {
public:
  ~CudaBackend();
  CudaBackend(const CudaBackend &) = delete;
  CudaBackend &operator=(const CudaBackend &) = delete;

  /// Loads libkiln_runtime_cuda.so and checks that device 0 exists.
  /// `artifactDir` names the artifact in messages ("DIR targets cuda but ...").
  static Status open(const std::string &artifactDir,
                     std::unique_ptr<CudaBackend> &out);

  /// Creates the device model (weights upload, cuBLASLt). Once.
  Status createModel(const kiln_cudaexec_model_desc_t &desc);
  /// A session executor on this model.
  Status createExecutor(std::unique_ptr<Executor> &out) const;
  /// A stepper (the model must have a step entry point).
  Status createStepper(const kiln_cudaexec_step_desc_t &desc,
                       std::unique_ptr<CudaStepper> &out) const;
  /// ncclGetUniqueId (rank 0 of a partitioned cuda artifact), 128 bytes.
  Status ncclUniqueId(uint8_t out[128]) const;
  /// Device-to-device copy bandwidth, bytes/s.
  Status memcpyBandwidth(uint64_t bytes, int32_t reps, double &out) const;

  const std::string &deviceName() const { return deviceName_; }
  /// Global memory of the device, bytes.
  uint64_t deviceMemory() const { return deviceMemory_; }

private:
  CudaBackend() = default;
  const kiln_cudaexec_api_t *api_ = nullptr;
  kiln_cudaexec_model_t *model_ = nullptr;
  std::string deviceName_;
  uint64_t deviceMemory_ = 0;
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_CUDA_CUDABACKEND_H
