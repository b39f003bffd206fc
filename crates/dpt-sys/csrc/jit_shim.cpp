// The TorchScript half of the shim: loading a user's model (torch.jit.save'd in Python), its
// parameters and buffers by name (tch does not expose buffers), its forward pass in train or
// eval mode, and saving it back. Same conventions as c10d_shim.cpp: every C++ exception is
// caught and its message returned through `err`.
#include "c10d_shim.h"

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/script.h>

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

// `device` is the replica's: loading and every forward run with it as the current device, as
// nn.parallel.parallel_apply runs each replica under torch.cuda.device(d), so model code that
// says `.cuda()` or `device="cuda"` lands on the replica's GPU, not on GPU 0.
struct dpt_module {
  torch::jit::Module m;
  c10::Device device;
};

static std::optional<c10::Device> cuda_only(c10::Device device) {
  return device.is_cuda() ? std::optional<c10::Device>(device) : std::nullopt;
}

static dpt_module* load_module(const char* path, int cuda_index) {
  c10::Device device = cuda_index < 0 ? c10::Device(c10::kCPU)
                                      : c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_index));
  c10::OptionalDeviceGuard guard(cuda_only(device));
  return new dpt_module{torch::jit::load(path, device), device};
}

// Copies the names and tensors of `list` into malloc'ed arrays the caller owns. A tensor held
// under two names (GPT-2's embedding tied to its output head) is listed once, under its first
// name, as Python's `named_parameters()` lists it: one tensor to store, reduce and update.
template <typename List>
static size_t export_named(const List& list, char*** names, at::Tensor*** tensors) {
  std::vector<std::pair<std::string, at::Tensor>> items;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : list) {
    if (seen.insert(item.value.unsafeGetTensorImpl()).second) {
      items.emplace_back(item.name, item.value);
    }
  }
  size_t n = items.size();
  *names = static_cast<char**>(std::malloc(sizeof(char*) * (n == 0 ? 1 : n)));
  *tensors = static_cast<at::Tensor**>(std::malloc(sizeof(at::Tensor*) * (n == 0 ? 1 : n)));
  for (size_t i = 0; i < n; ++i) {
    (*names)[i] = dpt_strdup(items[i].first.c_str());
    (*tensors)[i] = new at::Tensor(items[i].second);
  }
  return n;
}

// Runs the module's graph op by op, as its Python original runs in eager mode, rather than
// through the graph executor's optimizations (a thread-local switch, so set per call). Those
// make the backward pass TorchScript's own autodiff graphs, whose dropout draws a Bernoulli mask
// and multiplies it in even at p = 0 (symbolic_script.cpp), which eager mode skips: a timm
// ViT-Tiny's step took 1.85-1.93 s scripted against 1.46-1.72 s eager on one thread, and
// 1.43-1.50 s scripted with the optimizations off.
struct EagerLike {
  bool before = torch::jit::getGraphExecutorOptimize();
  EagerLike() { torch::jit::setGraphExecutorOptimize(false); }
  ~EagerLike() { torch::jit::setGraphExecutorOptimize(before); }
};

// Runs `forward` on `n` inputs; a tensor output is one tensor, a tuple or list of tensors each of
// its elements in order (nanoGPT's `(logits, loss)`), into a malloc'ed array the caller owns.
static size_t forward(dpt_module* module, at::Tensor* const* inputs, size_t n, at::Tensor*** outputs) {
  c10::OptionalDeviceGuard guard(cuda_only(module->device));
  EagerLike eager;
  std::vector<c10::IValue> args;
  for (size_t i = 0; i < n; ++i) {
    args.emplace_back(*inputs[i]);
  }
  c10::IValue out = module->m.forward(args);
  std::vector<at::Tensor> tensors;
  if (out.isTensor()) {
    tensors.push_back(out.toTensor());
  } else if (out.isTuple() || out.isList()) {
    std::vector<c10::IValue> items;
    if (out.isTuple()) {
      items = out.toTupleRef().elements().vec();
    } else {
      items = out.toListRef().vec();
    }
    for (const auto& item : items) {
      TORCH_CHECK(item.isTensor(), "forward returned a ", out.tagKind(), " holding a ", item.tagKind(),
                  "; it must return a tensor, or a tuple or list of tensors");
      tensors.push_back(item.toTensor());
    }
  } else {
    TORCH_CHECK(false, "forward returned a ", out.tagKind(), "; it must return a tensor, or a tuple or list of tensors");
  }
  size_t k = tensors.size();
  *outputs = static_cast<at::Tensor**>(std::malloc(sizeof(at::Tensor*) * (k == 0 ? 1 : k)));
  for (size_t i = 0; i < k; ++i) {
    (*outputs)[i] = new at::Tensor(tensors[i]);
  }
  return k;
}

// The number of inputs `forward` takes besides `self`.
static int forward_inputs(dpt_module* module) {
  const auto& schema = module->m.get_method("forward").function().getSchema();
  return static_cast<int>(schema.arguments().size()) - 1;
}

static int uses_randomness(dpt_module* module) {
  std::string code = module->m.dump_to_str(true, false, false);
  for (const char* op : {"dropout", "bernoulli", "rand"}) {
    if (code.find(op) != std::string::npos) {
      return 1;
    }
  }
  return 0;
}

extern "C" {

// Loads a TorchScript file onto the CPU (`cuda_index` < 0) or CUDA device `cuda_index`.
dpt_module* dpt_jit_load(const char* path, int cuda_index, char** err) {
  DPT_GUARD(err, nullptr, { return load_module(path, cuda_index); })
}

void dpt_jit_free(dpt_module* module) {
  delete module;
}

// The module's parameters (`buffers` = 0) or buffers, recursively, with their dotted names.
size_t dpt_jit_named(dpt_module* module, int buffers, char*** names, at::Tensor*** tensors, char** err) {
  DPT_GUARD(err, 0, {
    if (buffers != 0) {
      return export_named(module->m.named_buffers(true), names, tensors);
    }
    return export_named(module->m.named_parameters(true), names, tensors);
  })
}

void dpt_free_array(void* array) {
  std::free(array);
}

int dpt_jit_set_train(dpt_module* module, int on, char** err) {
  DPT_GUARD(err, -1, {
    module->m.train(on != 0);
    return 0;
  })
}

size_t dpt_jit_forward(dpt_module* module, at::Tensor* const* inputs, size_t n, at::Tensor*** outputs, char** err) {
  DPT_GUARD(err, 0, { return forward(module, inputs, n, outputs); })
}

int dpt_jit_forward_inputs(dpt_module* module, char** err) {
  DPT_GUARD(err, -1, { return forward_inputs(module); })
}

int dpt_jit_save(dpt_module* module, const char* path, char** err) {
  DPT_GUARD(err, -1, {
    module->m.save(path);
    return 0;
  })
}

// Whether the module's code draws random numbers (dropout and kin).
int dpt_jit_uses_randomness(dpt_module* module, char** err) {
  DPT_GUARD(err, -1, { return uses_randomness(module); })
}

}  // extern "C"
