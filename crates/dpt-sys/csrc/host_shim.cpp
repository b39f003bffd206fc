// Host memory for batches: a byte tensor allocated page-locked by libtorch's caching host
// allocator (what `torch.empty(..., pin_memory=True)` and DataLoader's pinning use), so that a
// loader decodes straight into the memory the GPU copies from. Same conventions as
// c10d_shim.cpp: every C++ exception is caught and returned through `err`.
#include "c10d_shim.h"

#include <ATen/ATen.h>

extern "C" {

// A new uint8 tensor of `sizes` (`n` dimensions), page-locked when `pinned` is not 0.
at::Tensor* dpt_empty_bytes(const int64_t* sizes, size_t n, int pinned, char** err) {
  DPT_GUARD(err, nullptr, {
    auto options = at::TensorOptions().dtype(at::kByte).pinned_memory(pinned != 0);
    return new at::Tensor(at::empty(c10::IntArrayRef(sizes, n), options));
  })
}

}  // extern "C"
