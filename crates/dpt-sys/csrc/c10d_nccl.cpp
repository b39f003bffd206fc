// The NCCL half of the shim: c10d's ProcessGroupNCCL across processes, and the single-process
// multi-GPU allreduce nn.DataParallel uses (torch::cuda::nccl::all_reduce). Compiled on every
// machine, CPU-only ones included; without a GPU the calls fail cleanly. See c10d_shim.h.
#include "c10d_shim.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <torch/csrc/cuda/nccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <chrono>
#include <vector>

// c10's device-generic event: its CUDA implementation lives in libc10_cuda (no CUDA runtime
// symbol in this object); BACKEND_DEFAULT is a CUDA event with timing. Its record, elapsed
// time and destruction end by setting the device back to the thread's previous one with a plain
// cudaSetDevice, which on a thread that never chose a device means creating a context on GPU 0:
// every entry point below first makes the event's device current with a c10::DeviceGuard, which
// restores through MaybeSetDevice (no context), as at::cuda::CUDAEvent does with CUDAGuard.
struct dpt_event {
  c10::Event event;
  c10::DeviceIndex device;
};

static c10::Device cuda(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::CUDA, index);
}

extern "C" {

dpt_group* dpt_nccl_group(dpt_store* s, int rank, int size, int64_t timeout_ms, char** err) {
  DPT_GUARD(err, nullptr, {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = std::chrono::milliseconds(timeout_ms);
    return new dpt_group{c10::make_intrusive<c10d::ProcessGroupNCCL>(s->p, rank, size, opts)};
  })
}

// Sums `n` tensors, one per distinct GPU, in place, with one NCCL call.
int dpt_nccl_local_allreduce(at::Tensor* const* tensors, size_t n, char** err) {
  DPT_GUARD(err, -1, {
    std::vector<at::Tensor> v;
    for (size_t i = 0; i < n; ++i) {
      TORCH_CHECK(tensors[i]->is_cuda(), "NCCL needs CUDA tensors; tensor ", i, " is on ", tensors[i]->device());
      v.push_back(*tensors[i]);
    }
    TORCH_CHECK(!v.empty(), "nothing to sum");
    c10::DeviceGuard guard(v[0].device());
    torch::cuda::nccl::all_reduce(v, v);
    return 0;
  })
}

// What identifies CUDA device `device` to NVML and what it can do: compute capability, PCI
// domain, bus and device, and the 16-byte UUID.
int dpt_cuda_identity(int device, int* major, int* minor, int* pci_domain, int* pci_bus, int* pci_device, uint8_t* uuid, char** err) {
  DPT_GUARD(err, -1, {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device));
    *major = p->major;
    *minor = p->minor;
    *pci_domain = p->pciDomainID;
    *pci_bus = p->pciBusID;
    *pci_device = p->pciDeviceID;
    std::memcpy(uuid, p->uuid.bytes, 16);
    return 0;
  })
}

// A timing event on CUDA device `device` (PyTorch's torch.cuda.Event(enable_timing=True)).
static dpt_event* new_event(int device) {
  auto count = c10::cuda::device_count();
  TORCH_CHECK(device >= 0 && device < count, "no CUDA device ", device, " (this process sees ", count, ")");
  auto index = static_cast<c10::DeviceIndex>(device);
  return new dpt_event{c10::Event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT), index};
}

dpt_event* dpt_cuda_event_new(int device, char** err) {
  DPT_GUARD(err, nullptr, { return new_event(device); })
}

// Records the event on its device's current stream: it completes when the work queued there
// before it has run.
int dpt_cuda_event_record(dpt_event* ev, char** err) {
  DPT_GUARD(err, -1, {
    c10::DeviceGuard guard(cuda(ev->device));
    ev->event.record(at::cuda::getCurrentCUDAStream(ev->device).unwrap());
    return 0;
  })
}

// 1 when the work queued before the event has run, 0 while it has not (never waits).
int dpt_cuda_event_query(dpt_event* ev, char** err) {
  DPT_GUARD(err, -1, {
    c10::DeviceGuard guard(cuda(ev->device));
    return ev->event.query() ? 1 : 0;
  })
}

// The GPU time between two completed events in milliseconds (the caller waits for `later`
// with dpt_cuda_event_query, against its own deadline).
int dpt_cuda_event_elapsed_ms(dpt_event* earlier, dpt_event* later, float* ms, char** err) {
  DPT_GUARD(err, -1, {
    c10::DeviceGuard guard(cuda(later->device));
    *ms = static_cast<float>(earlier->event.elapsedTime(later->event));
    return 0;
  })
}

void dpt_cuda_event_free(dpt_event* ev) {
  try {
    c10::DeviceGuard guard(cuda(ev->device));
    delete ev;
  } catch (...) {
    delete ev;
  }
}

}  // extern "C"
