// The stores (TCPStore, PrefixStore), Gloo process groups, and the collectives and waits that
// work on any c10d backend. See c10d_shim.h.
#include "c10d_shim.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Logging.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<at::Tensor> tensors_of(at::Tensor* const* tensors, size_t n) {
  std::vector<at::Tensor> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    v.push_back(*tensors[i]);
  }
  return v;
}

// The tensors' device as the thread's current one while a collective is queued or waited on
// (none for CPU tensors), so c10d's per-device state is made on the tensors' GPU.
std::optional<c10::Device> cuda_device_of(const std::vector<at::Tensor>& v) {
  if (!v.empty() && v[0].is_cuda()) {
    return v[0].device();
  }
  return std::nullopt;
}

std::vector<std::string> keys_of(const char* const* keys, size_t n) {
  std::vector<std::string> v;
  for (size_t i = 0; i < n; ++i) {
    v.emplace_back(keys[i]);
  }
  return v;
}

}  // namespace

extern "C" {

void dpt_free_string(char* s) {
  std::free(s);
}

// torch.cuda.set_device: makes CUDA device `device` the calling thread's current one (its
// context is made there, once), through c10's registered CUDA guard implementation, so no CUDA
// header is needed and a CPU-only build refuses cleanly.
int dpt_cuda_set_device(int device, char** err) {
  DPT_GUARD(err, -1, {
    TORCH_CHECK(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA), "this libtorch has no CUDA backend");
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    auto count = impl->deviceCount();
    TORCH_CHECK(device >= 0 && device < count, "no CUDA device ", device, " (this process sees ", count, ")");
    impl->setDevice(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
    return 0;
  })
}

void dpt_free_bytes(uint8_t* b) {
  std::free(b);
}

// c10's log threshold (0 info, 1 warning, 2 error, 3 fatal): c10d logs every failed
// connection attempt with a backtrace to stderr, which dpt-tui reports as one line instead.
void dpt_set_c10_log_level(int level) {
  FLAGS_caffe2_log_level = level;
  c10::UpdateLoggingLevelsFromFlags();
}

dpt_store* dpt_tcp_store(
    const char* host,
    uint16_t port,
    int world_size,
    int is_server,
    int64_t timeout_ms,
    char** err) {
  DPT_GUARD(err, nullptr, {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = is_server != 0;
    if (world_size > 0) {
      opts.numWorkers = static_cast<size_t>(world_size);
    }
    opts.waitWorkers = false;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    auto store = c10::make_intrusive<c10d::TCPStore>(std::string(host), opts);
    return new dpt_store{store};
  })
}

dpt_store* dpt_prefix_store(const char* prefix, dpt_store* base, char** err) {
  DPT_GUARD(err, nullptr, {
    return new dpt_store{c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), base->p)};
  })
}

void dpt_store_free(dpt_store* s) {
  delete s;
}

int dpt_store_set(dpt_store* s, const char* key, const uint8_t* data, size_t len, char** err) {
  DPT_GUARD(err, -1, {
    s->p->set(std::string(key), std::vector<uint8_t>(data, data + len));
    return 0;
  })
}

int dpt_store_get(dpt_store* s, const char* key, uint8_t** out, size_t* len, char** err) {
  DPT_GUARD(err, -1, {
    std::vector<uint8_t> v = s->p->get(std::string(key));
    *len = v.size();
    *out = static_cast<uint8_t*>(std::malloc(v.size() == 0 ? 1 : v.size()));
    if (!v.empty()) {
      std::memcpy(*out, v.data(), v.size());
    }
    return 0;
  })
}

int64_t dpt_store_add(dpt_store* s, const char* key, int64_t value, char** err) {
  DPT_GUARD(err, -1, { return s->p->add(std::string(key), value); })
}

int dpt_store_wait(dpt_store* s, const char* const* keys, size_t n, int64_t timeout_ms, char** err) {
  DPT_GUARD(err, -1, {
    s->p->wait(keys_of(keys, n), std::chrono::milliseconds(timeout_ms));
    return 0;
  })
}

int dpt_store_check(dpt_store* s, const char* const* keys, size_t n, char** err) {
  DPT_GUARD(err, -1, { return s->p->check(keys_of(keys, n)) ? 1 : 0; })
}

dpt_group* dpt_gloo_group(dpt_store* s, int rank, int size, int64_t timeout_ms, char** err) {
  DPT_GUARD(err, nullptr, {
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->timeout = std::chrono::milliseconds(timeout_ms);
    // As torch.distributed does: GLOO_SOCKET_IFNAME names the interfaces (comma-separated),
    // else the address the host name resolves to.
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && ifname[0] != '\0') {
      std::stringstream names(ifname);
      std::string name;
      while (std::getline(names, name, ',')) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      }
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    return new dpt_group{c10::make_intrusive<c10d::ProcessGroupGloo>(s->p, rank, size, opts)};
  })
}

void dpt_group_free(dpt_group* g) {
  delete g;
}

// op: 0 sums, 1 takes the maximum.
dpt_work* dpt_allreduce(dpt_group* g, at::Tensor* const* tensors, size_t n, int op, char** err) {
  DPT_GUARD(err, nullptr, {
    auto v = tensors_of(tensors, n);
    c10::OptionalDeviceGuard guard(cuda_device_of(v));
    c10d::AllreduceOptions opts;
    opts.reduceOp = op == 1 ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    return new dpt_work{g->p->allreduce(v, opts)};
  })
}

dpt_work* dpt_broadcast(dpt_group* g, at::Tensor* const* tensors, size_t n, int root, char** err) {
  DPT_GUARD(err, nullptr, {
    auto v = tensors_of(tensors, n);
    c10::OptionalDeviceGuard guard(cuda_device_of(v));
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return new dpt_work{g->p->broadcast(v, opts)};
  })
}

// Sums the ranks' tensors into rank `root`'s. The others' hold partial sums afterwards (Gloo's
// ring writes into them): only the root may read its tensor.
dpt_work* dpt_reduce(dpt_group* g, at::Tensor* const* tensors, size_t n, int root, char** err) {
  DPT_GUARD(err, nullptr, {
    auto v = tensors_of(tensors, n);
    c10::OptionalDeviceGuard guard(cuda_device_of(v));
    c10d::ReduceOptions opts;
    opts.rootRank = root;
    opts.reduceOp = c10d::ReduceOp::SUM;
    return new dpt_work{g->p->reduce(v, opts)};
  })
}

int dpt_work_wait(dpt_work* w, int64_t timeout_ms, char** err) {
  DPT_GUARD(err, -1, {
    w->p->wait(std::chrono::milliseconds(timeout_ms));
    return 0;
  })
}

void dpt_work_free(dpt_work* w) {
  delete w;
}

}  // extern "C"
