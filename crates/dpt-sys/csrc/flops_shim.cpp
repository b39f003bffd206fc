// The FLOP-counting half of the shim, for model FLOP utilisation: while a counter is open on a
// thread, the floating-point operations of the operators that thread dispatches are summed as
// PyTorch's torch.utils.flop_counter.FlopCounterMode counts them (2 per multiply-add; matrix
// products, convolutions and scaled-dot-product attention only; bias adds and elementwise
// operators are free).
//
// How: a thread-local at::RecordFunction callback (ATen/record_function.h), which the dispatcher
// runs around every operator it dispatches on the thread, eager calls and the TorchScript
// interpreter's alike. Only the outermost counted operator is counted: it hides every operator it
// calls (linear's addmm is counted, conv2d's convolution is, and the cudnn/mkldnn kernel under it
// is not; sdpa is, and the bmm of its math path is not), kept by a per-thread depth. That is
// FlopCounterMode's rule too: it runs an operator it counts below its Python key, unseen inside,
// and opens up (decomposes) the composite ones it does not count, such as sdpa.
//
// Counters on one thread nest: each open counter counts every operator dispatched while it is
// open, and the thread's one callback stays registered while any is. The callback's state is
// the thread's own: libtorch propagates thread-local callbacks to the threads that continue a
// thread's work (autograd's device threads, at::launch), and there it finds no open counter and
// counts nothing. Same conventions as c10d_shim.cpp: every C++ exception is caught and returned
// through `err`, and none leaves a callback.
#include "c10d_shim.h"

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

struct dpt_flops {
  double total = 0.0;
};

namespace {

// How a counted operator's FLOPs follow from its arguments.
enum class Rule {
  none,
  mm,           // (a [m,k], b [k,n]): 2mnk
  addmm,        // (bias, a, b): as mm
  bmm,          // (a [B,m,k], b [B,k,n]): 2Bmnk
  baddbmm,      // (bias, a, b): as bmm
  convolution,  // (x, w, bias, stride, padding, dilation, transposed, ...)
  conv_kernel,  // a backend's kernel (x, w, ...), never transposed
  attention,    // (q [..., L, E], k [..., S, E], v [..., S, Ev], ...): 2·batch·L·S·(E + Ev)
};

struct Named {
  const char* name;
  Rule rule;
};

// The operators counted: FlopCounterMode's forward registry plus the attention entry points it
// reaches only through a decomposition (sdpa itself, its math path, the CPU flash kernel, which
// FlopCounterMode does not count at all).
constexpr Named kCounted[] = {
    {"aten::mm", Rule::mm},
    {"aten::addmm", Rule::addmm},
    {"aten::bmm", Rule::bmm},
    {"aten::baddbmm", Rule::baddbmm},
    {"aten::convolution", Rule::convolution},
    {"aten::_convolution", Rule::convolution},
    {"aten::convolution_overrideable", Rule::convolution},
    {"aten::cudnn_convolution", Rule::conv_kernel},
    {"aten::mkldnn_convolution", Rule::conv_kernel},
    {"aten::_slow_conv2d_forward", Rule::conv_kernel},
    {"aten::scaled_dot_product_attention", Rule::attention},
    {"aten::_scaled_dot_product_attention_math", Rule::attention},
    {"aten::_scaled_dot_product_flash_attention", Rule::attention},
    {"aten::_scaled_dot_product_flash_attention_for_cpu", Rule::attention},
    {"aten::_scaled_dot_product_efficient_attention", Rule::attention},
    {"aten::_scaled_dot_product_cudnn_attention", Rule::attention},
    {"aten::_scaled_dot_product_fused_attention_overrideable", Rule::attention},
};

Rule rule_of(const char* name) {
  if (std::strncmp(name, "aten::", 6) != 0) {
    return Rule::none;
  }
  for (const Named& n : kCounted) {
    if (std::strcmp(name, n.name) == 0) {
      return n.rule;
    }
  }
  return Rule::none;
}

// The calling thread's counting state.
struct ThreadCount {
  std::vector<dpt_flops*> open;  // the counters open on this thread, in opening order
  at::CallbackHandle handle = at::INVALID_CALLBACK_HANDLE;
  int depth = 0;  // counted operators running on this thread, the outermost included
  // The outermost one's FLOPs, known from its inputs, or for a convolution that is not
  // transposed, its FLOPs per point of its output's spatial shape (known at its end).
  double flops = 0.0;
  double per_output_point = 0.0;
};
thread_local ThreadCount tls_count;

double product(c10::IntArrayRef sizes, size_t from) {
  double p = 1.0;
  for (size_t i = from; i < sizes.size(); ++i) {
    p *= static_cast<double>(sizes[i]);
  }
  return p;
}

bool has_dims(const c10::IValue& v, size_t dims) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().dim() == static_cast<int64_t>(dims);
}

// 2mnk for a [m,k] · [k,n] product, each of `batch_dims` leading dimensions times more.
double matmul_flops(const c10::IValue& a, const c10::IValue& b, size_t batch_dims) {
  if (!has_dims(a, batch_dims + 2) || !has_dims(b, batch_dims + 2)) {
    return 0.0;
  }
  auto as = a.toTensor().sizes();
  auto bs = b.toTensor().sizes();
  return 2.0 * product(as, 0) * static_cast<double>(bs[batch_dims + 1]);
}

double attention_flops(const c10::IValue& q, const c10::IValue& k, const c10::IValue& v) {
  for (const c10::IValue* t : {&q, &k, &v}) {
    if (!t->isTensor() || !t->toTensor().defined() || t->toTensor().dim() < 2) {
      return 0.0;
    }
  }
  auto qs = q.toTensor().sizes();
  const double batch_l = product(qs, 0) / static_cast<double>(qs.back());  // batch · L
  const double s = static_cast<double>(k.toTensor().sizes().end()[-2]);
  const double e = static_cast<double>(qs.back());
  const double ev = static_cast<double>(v.toTensor().sizes().back());
  return 2.0 * batch_l * s * (e + ev);
}

// Sets the outermost counted operator's FLOPs (or FLOPs per output point) from its arguments.
void start_counting(ThreadCount& t, Rule rule, c10::ArrayRef<const c10::IValue> args) {
  t.flops = 0.0;
  t.per_output_point = 0.0;
  const size_t n = args.size();
  switch (rule) {
    case Rule::mm:
      t.flops = n >= 2 ? matmul_flops(args[0], args[1], 0) : 0.0;
      break;
    case Rule::addmm:
      t.flops = n >= 3 ? matmul_flops(args[1], args[2], 0) : 0.0;
      break;
    case Rule::bmm:
      t.flops = n >= 2 ? matmul_flops(args[0], args[1], 1) : 0.0;
      break;
    case Rule::baddbmm:
      t.flops = n >= 3 ? matmul_flops(args[1], args[2], 1) : 0.0;
      break;
    case Rule::convolution:
    case Rule::conv_kernel: {
      if (n < 2 || !args[0].isTensor() || !args[1].isTensor() || !args[0].toTensor().defined() ||
          !args[1].toTensor().defined() || args[0].toTensor().dim() < 3) {
        break;
      }
      auto x = args[0].toTensor().sizes();
      // FlopCounterMode's conv_flop_count: 2 · batch · prod(weight) · prod(the spatial shape
      // the filter is applied at), which is the output's for a convolution, and the input's
      // for a transposed one (each input point scatters the whole filter).
      const double per_point = 2.0 * static_cast<double>(x[0]) * product(args[1].toTensor().sizes(), 0);
      const bool transposed = rule == Rule::convolution && n > 6 && args[6].isBool() && args[6].toBool();
      if (transposed) {
        t.flops = per_point * product(x, 2);
      } else {
        t.per_output_point = per_point;
      }
      break;
    }
    case Rule::attention:
      t.flops = n >= 3 ? attention_flops(args[0], args[1], args[2]) : 0.0;
      break;
    case Rule::none:
      break;
  }
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  ThreadCount& t = tls_count;
  if (t.open.empty()) {
    return nullptr;
  }
  const Rule rule = rule_of(fn.name());
  if (rule == Rule::none) {
    return nullptr;
  }
  if (++t.depth > 1) {
    return nullptr;  // inside a counted operator
  }
  try {
    // The boxed path (the TorchScript interpreter) may pass more of its stack than the
    // operator's arguments: they are the last ones.
    auto all = fn.inputs();
    const size_t n = std::min(all.size(), fn.num_inputs());
    start_counting(t, rule, all.slice(all.size() - n));
  } catch (...) {
    t.flops = 0.0;
    t.per_output_point = 0.0;
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  ThreadCount& t = tls_count;
  // A depth of 0: the operator started before the thread's first counter opened.
  if (t.open.empty() || t.depth == 0 || rule_of(fn.name()) == Rule::none || --t.depth > 0) {
    return;
  }
  double flops = t.flops;
  try {
    if (t.per_output_point > 0.0) {
      // The convolution's one output, the last value on a boxed stack.
      const auto& out = fn.outputs();
      if (!out.empty() && out.back().isTensor() && out.back().toTensor().defined()) {
        flops = t.per_output_point * product(out.back().toTensor().sizes(), 2);
      }
    }
  } catch (...) {
    flops = 0.0;
  }
  for (dpt_flops* c : t.open) {
    c->total += flops;
  }
  t.flops = 0.0;
  t.per_output_point = 0.0;
}

}  // namespace

extern "C" {

// Opens a counter on the calling thread (closed by dpt_flops_close on the same thread). It
// counts from now on, alongside any counter already open on the thread.
dpt_flops* dpt_flops_open(char** err) {
  DPT_GUARD(err, nullptr, {
    ThreadCount& t = tls_count;
    auto counter = std::make_unique<dpt_flops>();
    t.open.reserve(t.open.size() + 1);
    if (t.open.empty()) {
      at::RecordFunctionCallback callback(&on_start, &on_end);
      callback.needsInputs(true).needsOutputs(true).scopes({at::RecordScope::FUNCTION});
      t.handle = at::addThreadLocalCallback(callback);
      t.depth = 0;
    }
    t.open.push_back(counter.get());
    return counter.release();
  })
}

// The FLOPs counted since `counter` opened.
double dpt_flops_total(dpt_flops* counter) {
  return counter->total;
}

// Closes a counter of the calling thread's; the last one closed removes the thread's callback.
void dpt_flops_close(dpt_flops* counter) {
  ThreadCount& t = tls_count;
  t.open.erase(std::remove(t.open.begin(), t.open.end(), counter), t.open.end());
  if (t.open.empty() && t.handle != at::INVALID_CALLBACK_HANDLE) {
    try {
      at::removeCallback(t.handle);
    } catch (...) {
    }
    t.handle = at::INVALID_CALLBACK_HANDLE;
    t.depth = 0;
  }
  delete counter;
}

}  // extern "C"
