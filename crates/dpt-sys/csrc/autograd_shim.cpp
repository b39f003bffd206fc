// The autograd half of the shim: a hook on a leaf tensor that hands its gradient to Rust the
// moment the backward pass computes it, which is what lets the gradient allreduce start bucket
// by bucket while the rest of the backward pass still runs (as DDP's reducer does with its
// per-parameter hooks). Same conventions as c10d_shim.cpp: every C++ exception is caught and
// its message returned through `err`.
#include "c10d_shim.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <memory>
#include <string>

extern "C" {

// Registers `fn(ctx, grad)` as a tensor hook of `leaf`. A leaf's tensor hooks run on the
// gradient reaching its AccumulateGrad node, in `backward()` and also in `autograd.grad` with
// the leaf among the inputs (the engine runs a captured input's tensor pre-hooks before
// capturing it; torch/csrc/autograd/engine.cpp, `evaluate_function`). `ctx` is owned by the
// hook from here on, also when registering fails.
int dpt_on_grad(at::Tensor* leaf, dpt_grad_fn fn, void* ctx, dpt_drop_fn drop, char** err) {
  std::shared_ptr<void> owner(ctx, drop);
  DPT_GUARD(err, -1, {
    leaf->register_hook([fn, owner](const at::Tensor& grad) -> at::Tensor {
      char* message = nullptr;
      int code = fn(owner.get(), new at::Tensor(grad), &message);
      if (code == 2) {
        // A tensor hook's result replaces the gradient when defined and of the same shape,
        // type and device (torch/csrc/autograd/cpp_hook.cpp): one zero seen at every index.
        return at::zeros({}, grad.options()).expand(grad.sizes());
      }
      if (code != 0) {
        std::string why = message != nullptr ? message : "a gradient hook failed";
        std::free(message);
        TORCH_CHECK(false, why);
      }
      return at::Tensor();
    });
    return 0;
  })
}

}  // extern "C"
