// The fused optimizer kernels PyTorch's `fused=True` optimizers call (`torch._fused_adam_`,
// `torch._fused_adamw_`, `torch._fused_sgd_`; CUDA and CPU kernels): one pass over each tensor's
// parameters, gradients and state, with the gradients' divisor (`grad_scale`) and the skip flag
// (`found_inf`) read on the device. Same conventions as c10d_shim.cpp: every C++ exception is
// caught and returned through `err`.
#include "c10d_shim.h"

#include <ATen/ATen.h>

#include <optional>
#include <vector>

namespace {

std::vector<at::Tensor> list_of(dpt_tensor* const* t, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(*t[i]);
  }
  return out;
}

std::optional<at::Tensor> maybe(dpt_tensor* t) {
  return t != nullptr ? std::optional<at::Tensor>(*t) : std::nullopt;
}

}  // namespace

extern "C" {

// One Adam (`decoupled` 0) or AdamW step of the `n` tensors `params`, from `grads` (each divided
// by `grad_scale` first when given), `exp_avgs` and `exp_avg_sqs` updated in place; `steps`: each
// tensor's step count after this step (float32, on the tensors' device). The learning rate is
// `lr_tensor` when given (read by the kernels on the device: the `tensor_lr` overloads), else
// `lr`. Nothing is changed when `found_inf` (when given) holds a non-zero value.
int dpt_fused_adam(dpt_tensor* const* params, dpt_tensor* const* grads, dpt_tensor* const* exp_avgs,
                   dpt_tensor* const* exp_avg_sqs, dpt_tensor* const* steps, size_t n, double lr,
                   dpt_tensor* lr_tensor, double beta1, double beta2, double weight_decay, double eps, int decoupled,
                   dpt_tensor* grad_scale, dpt_tensor* found_inf, char** err) {
  DPT_GUARD(err, -1, {
    const auto p = list_of(params, n);
    const auto g = list_of(grads, n);
    const auto m = list_of(exp_avgs, n);
    const auto v = list_of(exp_avg_sqs, n);
    const auto s = list_of(steps, n);
    const std::vector<at::Tensor> no_max;
    if (lr_tensor != nullptr && decoupled != 0) {
      at::_fused_adamw_(p, g, m, v, no_max, s, *lr_tensor, beta1, beta2, weight_decay, eps, false, false,
                        maybe(grad_scale), maybe(found_inf));
    } else if (lr_tensor != nullptr) {
      at::_fused_adam_(p, g, m, v, no_max, s, *lr_tensor, beta1, beta2, weight_decay, eps, false, false,
                       maybe(grad_scale), maybe(found_inf));
    } else if (decoupled != 0) {
      at::_fused_adamw_(p, g, m, v, no_max, s, lr, beta1, beta2, weight_decay, eps, false, false,
                        maybe(grad_scale), maybe(found_inf));
    } else {
      at::_fused_adam_(p, g, m, v, no_max, s, lr, beta1, beta2, weight_decay, eps, false, false,
                       maybe(grad_scale), maybe(found_inf));
    }
    return 0;
  })
}

// One SGD step of the `n` tensors `params` from `grads` (divided by `grad_scale` when given), with
// `momentum_buffers` (none when `momentum` is 0; `first_step`: they are filled with the gradient,
// as PyTorch's first step does). The learning rate is `lr_tensor` when given, else `lr`. Nothing
// is changed when `found_inf` holds a non-zero value.
int dpt_fused_sgd(dpt_tensor* const* params, dpt_tensor* const* grads, dpt_tensor* const* momentum_buffers,
                  size_t n, double lr, dpt_tensor* lr_tensor, double momentum, double weight_decay, int nesterov,
                  int first_step, dpt_tensor* grad_scale, dpt_tensor* found_inf, char** err) {
  DPT_GUARD(err, -1, {
    const auto p = list_of(params, n);
    const auto g = list_of(grads, n);
    const auto b = momentum != 0.0 ? list_of(momentum_buffers, n) : std::vector<at::Tensor>();
    if (lr_tensor != nullptr) {
      at::_fused_sgd_(p, g, b, weight_decay, momentum, *lr_tensor, 0.0, nesterov != 0, false, first_step != 0,
                      maybe(grad_scale), maybe(found_inf));
    } else {
      at::_fused_sgd_(p, g, b, weight_decay, momentum, lr, 0.0, nesterov != 0, false, first_step != 0,
                      maybe(grad_scale), maybe(found_inf));
    }
    return 0;
  })
}

}  // extern "C"
