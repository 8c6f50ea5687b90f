//===- CudaBackend.cpp - libkiln_runtime's side of the CUDA executor -----===//
#include "cuda/CudaBackend.h"
#include "base/LibraryPath.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace kiln::rt {

Status cudaStatus(int32_t code, const kiln_cudaexec_error_t &err) {
  return backendStatus(code, err.message, sizeof(err.message),
                       "CUDA executor error " + std::to_string(code));
}

namespace {

struct LoadedLibrary {
  const kiln_cudaexec_api_t *api = nullptr;
  std::string path;
  bool missing = false; ///< the file does not exist (built without CUDA)
  std::string error;    ///< it exists but could not be used
};

/// Loads libkiln_runtime_cuda.so once per process and path and never unloads
/// it (unloading libcudart while the process runs is not worth the risk).
/// KILN_RUNTIME_CUDA_LIBRARY overrides the path (tests, relocated installs).
const LoadedLibrary &loadLibrary() {
  static std::mutex mutex;
  static std::map<std::string, LoadedLibrary> loaded;
  const char *env = std::getenv("KILN_RUNTIME_CUDA_LIBRARY");
  std::string path =
      env && *env ? env : runtimeDirectory() + "/libkiln_runtime_cuda.so";
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = loaded.try_emplace(path);
  LoadedLibrary &lib = it->second;
  if (!inserted)
    return lib;
  lib.path = path;
  struct stat st;
  if (::stat(lib.path.c_str(), &st) != 0) {
    lib.missing = true;
    return lib;
  }
  dlerror();
  void *handle = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *e = dlerror();
    lib.error = "cannot load " + lib.path + ": " + (e ? e : "unknown dlopen error");
    return lib;
  }
  auto get = reinterpret_cast<kiln_cudaexec_get_api_fn>(
      dlsym(handle, "kiln_cudaexec_get_api"));
  const kiln_cudaexec_api_t *api = get ? get() : nullptr;
  if (!api) {
    lib.error = lib.path + " does not export kiln_cudaexec_get_api";
    return lib;
  }
  if (api->interface_version != KILN_CUDAEXEC_INTERFACE_VERSION ||
      api->struct_size < sizeof(kiln_cudaexec_api_t)) {
    lib.error = lib.path + " implements executor interface version " +
                std::to_string(api->interface_version) + ", expected " +
                std::to_string(KILN_CUDAEXEC_INTERFACE_VERSION) +
                " (mismatched runtime libraries)";
    return lib;
  }
  lib.api = api;
  return lib;
}

class CudaExecutor final : public Executor {
public:
  CudaExecutor(const kiln_cudaexec_api_t *api, kiln_cudaexec_session_t *s)
      : api_(api), session_(s) {}
  ~CudaExecutor() override { api_->session_release(session_); }

  Status reset(bool) override {
    kiln_cudaexec_error_t err{};
    return cudaStatus(api_->session_reset(session_, &err), err);
  }
  Status prefill(const int32_t *tokens, int64_t n, int64_t pos) override {
    kiln_cudaexec_error_t err{};
    return cudaStatus(api_->session_prefill(session_, tokens, n, pos, &err), err);
  }
  Status decode(int32_t token, int64_t pos) override {
    kiln_cudaexec_error_t err{};
    return cudaStatus(api_->session_decode(session_, token, pos, &err), err);
  }
  Status verify(const int32_t *tokens, int64_t n, int64_t pos,
                float *rows) override {
    kiln_cudaexec_error_t err{};
    return cudaStatus(
        api_->session_verify(session_, tokens, n, pos, rows, &err), err);
  }
  const float *logits() override {
    kiln_cudaexec_error_t err{};
    const float *out = nullptr;
    return api_->session_logits(session_, &out, &err) == 0 ? out : nullptr;
  }
  bool samplesOnDevice() const override { return true; }
  Status sample(float temperature, int32_t topK, float topP, float coin,
                int32_t &outToken) override {
    kiln_cudaexec_error_t err{};
    return cudaStatus(api_->session_sample(session_, temperature, topK, topP,
                                           coin, &outToken, &err),
                      err);
  }

private:
  const kiln_cudaexec_api_t *api_;
  kiln_cudaexec_session_t *session_;
};

} // namespace

CudaBackend::~CudaBackend() {
  if (api_ && model_)
    api_->model_release(model_);
}

Status CudaBackend::open(const std::string &artifactDir,
                         std::unique_ptr<CudaBackend> &out) {
  const LoadedLibrary &lib = loadLibrary();
  if (lib.missing)
    return unimplemented(artifactDir +
                         " targets cuda but this runtime was built without "
                         "CUDA support (libkiln_runtime_cuda.so not found)");
  if (!lib.api)
    return unimplemented(artifactDir + " targets cuda but " + lib.error);
  kiln_cudaexec_error_t err{};
  char name[256] = {0};
  uint64_t memory = 0;
  int32_t code = lib.api->device_probe(name, sizeof(name), &memory, &err);
  if (code != 0)
    return Status(KILN_RT_NOT_FOUND,
                  artifactDir + " targets cuda but no CUDA device is available (" +
                      cudaStatus(code, err).message() + ")");
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->api_ = lib.api;
  b->deviceName_ = name;
  b->deviceMemory_ = memory;
  out = std::move(b);
  return Status::ok();
}

Status CudaBackend::createModel(const kiln_cudaexec_model_desc_t &desc) {
  if (model_)
    return internalError("CudaBackend::createModel called twice");
  kiln_cudaexec_error_t err{};
  return cudaStatus(api_->model_create(&desc, &model_, &err), err);
}

Status CudaBackend::ncclUniqueId(uint8_t out[128]) const {
  kiln_cudaexec_error_t err{};
  return cudaStatus(api_->nccl_unique_id(out, &err), err);
}

Status CudaBackend::createExecutor(std::unique_ptr<Executor> &out) const {
  if (!model_)
    return internalError("CUDA model not created");
  kiln_cudaexec_error_t err{};
  kiln_cudaexec_session_t *s = nullptr;
  KILN_RT_RETURN_IF_ERROR(cudaStatus(api_->session_create(model_, &s, &err), err));
  out = std::make_unique<CudaExecutor>(api_, s);
  return Status::ok();
}

Status CudaBackend::createStepper(const kiln_cudaexec_step_desc_t &desc,
                                  std::unique_ptr<CudaStepper> &out) const {
  if (!model_)
    return internalError("CUDA model not created");
  kiln_cudaexec_error_t err{};
  kiln_cudaexec_stepper_t *s = nullptr;
  KILN_RT_RETURN_IF_ERROR(
      cudaStatus(api_->stepper_create(model_, &desc, &s, &err), err));
  out = std::make_unique<CudaStepper>(api_, s);
  return Status::ok();
}

Status CudaBackend::memcpyBandwidth(uint64_t bytes, int32_t reps,
                                    double &out) const {
  kiln_cudaexec_error_t err{};
  return cudaStatus(api_->memcpy_bandwidth(bytes, reps, &out, &err), err);
}

} // namespace kiln::rt
