// Mixed precision and the f32 math modes: a scope of libtorch's autocast on the calling thread,
// entered and left as `torch.autocast`'s __enter__ and __exit__ set the thread-local state
// (ATen/autocast_mode.h), and the process-wide choice of TF32 for f32 matrix products and
// convolutions (ATen/Context.h, what `torch.set_float32_matmul_precision` and
// `torch.backends.cudnn.allow_tf32` set). Same conventions as c10d_shim.cpp: every C++
// exception is caught and returned through `err`.
#include "c10d_shim.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

// The state an autocast scope replaces, restored when it is left.
struct dpt_autocast {
  at::DeviceType device;
  bool prev_enabled;
  at::ScalarType prev_dtype;
  bool prev_cache_enabled;
};

extern "C" {

// Enters autocast for `cuda` (not 0) or the CPU, computing in bfloat16 (`half` 0) or float16:
// enabled and the dtype for that device type, one more level of nesting, the cast cache on.
dpt_autocast* dpt_autocast_enter(int cuda, int half, char** err) {
  DPT_GUARD(err, nullptr, {
    const auto device = cuda != 0 ? at::kCUDA : at::kCPU;
    auto* scope = new dpt_autocast;
    scope->device = device;
    scope->prev_enabled = at::autocast::is_autocast_enabled(device);
    scope->prev_dtype = at::autocast::get_autocast_dtype(device);
    scope->prev_cache_enabled = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_enabled(device, true);
    at::autocast::set_autocast_dtype(device, half != 0 ? at::kHalf : at::kBFloat16);
    at::autocast::increment_nesting();
    at::autocast::set_autocast_cache_enabled(true);
    return scope;
  })
}

// Leaves the scope: the outermost one clears the cache of casts (the low-precision copies of
// the weights made during the forward), and the state before it comes back.
void dpt_autocast_leave(dpt_autocast* scope) {
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
  at::autocast::set_autocast_enabled(scope->device, scope->prev_enabled);
  at::autocast::set_autocast_dtype(scope->device, scope->prev_dtype);
  at::autocast::set_autocast_cache_enabled(scope->prev_cache_enabled);
  delete scope;
}

// Whether autocast is on for `cuda` (not 0) or the CPU on this thread, and its dtype: 1 for
// float16, 0 for bfloat16, -1 for another. For tests and the start record.
int dpt_autocast_state(int cuda, int* dtype) {
  const auto device = cuda != 0 ? at::kCUDA : at::kCPU;
  const auto t = at::autocast::get_autocast_dtype(device);
  *dtype = t == at::kHalf ? 1 : (t == at::kBFloat16 ? 0 : -1);
  return at::autocast::is_autocast_enabled(device) ? 1 : 0;
}

// TF32 for float32 on CUDA: `on` not 0 lets cuBLAS matrix products and cuDNN convolutions use
// it, 0 keeps both in IEEE float32 (`torch.backends.cuda.matmul.allow_tf32` and
// `torch.backends.cudnn.allow_tf32`, which nanoGPT sets; unlike `set_float32_matmul_precision`
// they leave the CPU's oneDNN matrix products alone). Process-wide, as in PyTorch.
int dpt_set_tf32(int on, char** err) {
  DPT_GUARD(err, -1, {
    at::globalContext().setAllowTF32CuBLAS(on != 0);
    at::globalContext().setAllowTF32CuDNN(on != 0);
    return 0;
  })
}

// 1 when cuBLAS (`cudnn` 0) or cuDNN (not 0) may use TF32 for float32 now, 0 when not.
int dpt_tf32_state(int cudnn) {
  auto& context = at::globalContext();
  return (cudnn != 0 ? context.allowTF32CuDNN() : context.allowTF32CuBLAS()) ? 1 : 0;
}

}  // extern "C"
