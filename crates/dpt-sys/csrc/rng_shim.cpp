// The random-number half of the shim: a generator of the calling thread's own for the random
// numbers libtorch draws inside a model's forward pass (dropout, stochastic depth, any
// `bernoulli_`/`uniform_`/`normal_`... called without an explicit generator). Replicas in one
// process then draw side by side instead of taking turns on libtorch's one global CPU generator.
//
// How: ATen's dispatch key for custom generators (`CustomRNGKeyId`, c10/core/DispatchKey.h) is
// added to the thread's included keys while a scope is open. Every operator with a
// `Generator?` argument gets a kernel at that key which fills an absent generator with the
// thread's own (when the operator's tensors are on that generator's device) and passes the call
// on below the key; every other operator falls through. A CUDA device draws its fused dropout
// from the device's own default generator (no `Generator` argument), which the scope seeds.
// Same conventions as c10d_shim.cpp: every C++ exception is caught and returned through `err`.
#include "c10d_shim.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace {

// The generators of the open scope on this thread (none open: both empty).
struct ThreadGenerators {
  std::optional<at::Generator> cpu;
  std::optional<at::Generator> cuda;  // for the scope's CUDA device, if any
};
thread_local ThreadGenerators tls_generators;

bool is_optional_generator(const c10::Argument& arg) {
  const auto& type = arg.type();
  if (type->kind() != c10::TypeKind::OptionalType) {
    return false;
  }
  return type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// The device the operator's call runs on: its first tensor's, else its `device` argument's,
// else the CPU (a factory's default).
c10::Device call_device(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t base) {
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[base + i];
    if (v.isTensor() && v.toTensor().defined()) {
      return v.toTensor().device();
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[base + i];
    if (args[i].name() == "device" && v.isDevice()) {
      return v.toDevice();
    }
  }
  return c10::Device(c10::kCPU);
}

void use_thread_generator(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t base = stack->size() - args.size();
  const ThreadGenerators& own = tls_generators;
  if (own.cpu.has_value()) {
    const c10::Device device = call_device(schema, *stack, base);
    const std::optional<at::Generator>* gen = nullptr;
    if (device.is_cpu()) {
      gen = &own.cpu;
    } else if (own.cuda.has_value() && own.cuda->device() == device) {
      gen = &own.cuda;
    }
    if (gen != nullptr && gen->has_value()) {
      for (size_t i = 0; i < args.size(); ++i) {
        if (is_optional_generator(args[i]) && (*stack)[base + i].isNone()) {
          (*stack)[base + i] = c10::IValue(**gen);
        }
      }
    }
  }
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::CustomRNGKeyId),
                     stack);
}

// Registers the kernels once: a fall-through for every operator, ours for each one taking a
// `Generator?`. The libraries stay registered for the process's life.
void register_kernels() {
  static std::once_flag once;
  static std::vector<std::unique_ptr<torch::Library>> libraries;
  std::call_once(once, [] {
    auto fallback = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::DispatchKey::CustomRNGKeyId,
                                                     __FILE__, __LINE__);
    fallback->fallback(torch::CppFunction::makeFallthrough());
    libraries.push_back(std::move(fallback));
    auto aten = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CustomRNGKeyId,
                                                 __FILE__, __LINE__);
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) {
        continue;
      }
      auto handle = dispatcher.findOp(name);
      if (!handle.has_value() || !handle->hasSchema()) {
        continue;
      }
      bool draws = false;
      for (const auto& arg : handle->schema().arguments()) {
        draws = draws || is_optional_generator(arg);
      }
      if (draws) {
        std::string full = name.name.substr(6);
        if (!name.overload_name.empty()) {
          full += "." + name.overload_name;
        }
        aten->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&use_thread_generator>());
      }
    }
    libraries.push_back(std::move(aten));
  });
}

}  // namespace

// An open scope: the thread's included dispatch key, restored when the scope closes.
struct dpt_rng_scope {
  c10::impl::IncludeDispatchKeyGuard include{c10::DispatchKey::CustomRNGKeyId};
};

extern "C" {

// Opens a scope on the calling thread (closed by dpt_rng_close on the same thread): random
// numbers drawn on the CPU come from a generator seeded with `seed` as `torch.manual_seed(seed)`
// seeds the global one; with `cuda_index` >= 0 the device's default generator is seeded too
// (the caller makes sure no other thread draws from it meanwhile).
dpt_rng_scope* dpt_rng_open(uint64_t seed, int cuda_index, char** err) {
  DPT_GUARD(err, nullptr, {
    register_kernels();
    ThreadGenerators own;
    own.cpu = at::make_generator<at::CPUGeneratorImpl>(seed);
    if (cuda_index >= 0) {
      const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_index));
      at::Generator gen = at::globalContext().defaultGenerator(device);
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_current_seed(seed);
      }
      own.cuda = gen;
    }
    auto scope = std::make_unique<dpt_rng_scope>();
    tls_generators = std::move(own);
    return scope.release();
  })
}

// Closes the scope `dpt_rng_open` returned on this thread.
void dpt_rng_close(dpt_rng_scope* scope) {
  tls_generators = ThreadGenerators{};
  delete scope;
}

}  // extern "C"
