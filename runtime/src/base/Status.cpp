//===- Status.cpp - Runtime error values --------------------------*- C++ -*-===//
#include "base/Status.h"

#include <new>

struct kiln_rt_status_s {
  kiln_rt_status_code_t code;
  std::string message;
};

/// Returned when allocating a status fails; never deleted.
static kiln_rt_status_s gOutOfMemory{KILN_RT_RESOURCE_EXHAUSTED, "out of memory"};

namespace kiln::rt {

kiln_rt_status_t Status::release() const {
  if (isOk())
    return nullptr;
  auto *s = new (std::nothrow) kiln_rt_status_s{code_, message_};
  return s ? s : &gOutOfMemory;
}

} // namespace kiln::rt

extern "C" {

kiln_rt_status_code_t kiln_rt_status_code(kiln_rt_status_t status) {
  return status ? status->code : KILN_RT_OK;
}

const char *kiln_rt_status_message(kiln_rt_status_t status) {
  return status ? status->message.c_str() : "";
}

void kiln_rt_status_free(kiln_rt_status_t status) {
  if (status != &gOutOfMemory)
    delete status;
}

} // extern "C"
