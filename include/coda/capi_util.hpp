// Internal: turning a C++ Status into a C ABI return (records the message for coda_last_error),
// and the one rule every C ABI operator uses to choose where it runs (coda.h, "Where a call runs").
#pragma once

#include <cstddef>
#include <initializer_list>

#include "coda/tensor.hpp"

namespace coda::detail {

coda_status_t report(const Status& s);

// Where a pointer's memory lives. kDevice: memory CUDA allocated on a GPU (cudaMalloc and
// friends, cudaMallocManaged). kHost: everything else - pageable memory, pinned or registered host
// memory (cudaMallocHost, cudaHostRegister), any pointer when the process has no usable CUDA
// device or driver.
enum class Place { kHost, kDevice };
const char* place_name(Place p);

// The place of `p` (not null). Asks CUDA (cudaPointerGetAttributes) only when a CUDA device is
// visible (checked once per process); clears the error state of any CUDA call it makes. Fails
// (CODA_ERROR_CUDA) only when a device is visible but CUDA cannot answer (e.g. a broken context),
// where guessing could hand device memory to the host or the reverse.
Status place_of(const void* p, Place* place);
using Locator = Status (*)(const void* p, Place* place);

// One pointer argument of a C ABI call: a tensor's data (or null when the tensor is absent) or a
// raw pointer (workspace, device scalars).
struct Operand {
  const char* name;
  const void* ptr;
  Operand(const char* n, const coda_tensor_t* t) : name(n), ptr(t ? t->data : nullptr) {}
  Operand(const char* n, const void* p) : name(n), ptr(p) {}
  Operand(const char* n, std::nullptr_t) : name(n), ptr(nullptr) {}
};

// The common place of every non-null operand: INVALID_ARGUMENT naming the first one that lives
// elsewhere than the first. kHost when no operand is given (validation then names the missing one).
Status common_place(const char* op, std::initializer_list<Operand> operands, Place* place,
                    Locator locate = place_of);

// Runs a C ABI operator where its operands live: `gpu()` for device memory, `emu()` (the CPU
// emulator, synchronous; the stream is not used) for host memory. Both return a Status; the
// result is reported for coda_last_error.
template <class Gpu, class Emu>
coda_status_t dispatch(const char* op, std::initializer_list<Operand> operands, Gpu&& gpu, Emu&& emu) {
  Place place = Place::kHost;
  Status s = common_place(op, operands, &place);
  if (s.ok()) s = place == Place::kDevice ? gpu() : emu();
  return report(s);
}

}  // namespace coda::detail
