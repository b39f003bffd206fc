// The NCCL half of the shim: c10d's ProcessGroupNCCL across processes, and the single-process
// multi-GPU allreduce nn.DataParallel uses (torch::cuda::nccl::all_reduce). Compiled on every
// machine, CPU-only ones included; without a GPU the calls fail cleanly. See c10d_shim.h.
#include "c10d_shim.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/cuda/nccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <memory>
#include <tuple>
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

// The current stream set aside while a guard lives (c10's device-generic guard: its CUDA
// implementation is libc10_cuda's).
struct dpt_stream_guard {
  c10::StreamGuard guard;
};

// One side stream per GPU for the in-process sums, taken from c10's stream pool once and kept
// for the process, as ProcessGroupNCCL keeps one NCCL stream per device; from the
// high-priority pool, so it is never the low-priority pool stream ProcessGroupNCCL takes (two
// sums sharing a stream would only run one after the other, but they need not).
static at::cuda::CUDAStream side_stream(c10::DeviceIndex index) {
  static std::mutex lock;
  static std::map<c10::DeviceIndex, at::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> held(lock);
  auto found = streams.find(index);
  if (found == streams.end()) {
    found = streams.emplace(index, at::cuda::getStreamFromPool(true, index)).first;
  }
  return found->second;
}

// Makes `waiter` wait, on the device, for the work queued on `done` so far: an event without
// timing recorded on one and waited for by the other (c10d's syncStream). One event per pair of
// streams, made once and recorded again at each call (a wait already queued keeps the state the
// event had when it was queued), instead of one made and destroyed per bucket and step.
static void stream_wait(const at::cuda::CUDAStream& done, const at::cuda::CUDAStream& waiter) {
  static std::mutex lock;
  static std::map<std::tuple<c10::DeviceIndex, c10::StreamId, c10::StreamId>, std::unique_ptr<c10::Event>> events;
  c10::DeviceGuard guard(cuda(done.device_index()));
  std::lock_guard<std::mutex> held(lock);
  auto& ev = events[{done.device_index(), done.id(), waiter.id()}];
  if (!ev) {
    ev = std::make_unique<c10::Event>(c10::DeviceType::CUDA, c10::EventFlag::PYTORCH_DEFAULT);
  }
  ev->record(done.unwrap());
  ev->block(waiter.unwrap());
}

extern "C" {

// c10's CUDA sync debug mode: 0 off, 1 warn at each synchronizing CUDA call (counted on the
// threads that count, warn_shim.cpp), 2 fail it with an error that names it.
int dpt_cuda_sync_debug(int mode, char** err) {
  DPT_GUARD(err, -1, {
    c10::cuda::warning_state().set_sync_debug_mode(
        mode >= 2 ? c10::cuda::SyncDebugMode::L_ERROR
                  : (mode == 1 ? c10::cuda::SyncDebugMode::L_WARN : c10::cuda::SyncDebugMode::L_DISABLED));
    return 0;
  })
}

dpt_group* dpt_nccl_group(dpt_store* s, int rank, int size, int64_t timeout_ms, char** err) {
  DPT_GUARD(err, nullptr, {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = std::chrono::milliseconds(timeout_ms);
    return new dpt_group{c10::make_intrusive<c10d::ProcessGroupNCCL>(s->p, rank, size, opts)};
  })
}

// Sums `n` tensors, one per distinct GPU, in place, with one NCCL call, on each GPU's side
// stream (see side_stream): the kernels queued on the GPUs' current streams after this call
// do not wait for the sum. Each side stream first waits for the work queued so far on its
// GPU's current stream (which made the tensor), unless it is that current stream, and the tensors are marked as used there for
// the caching allocator, as ProcessGroupNCCL does with its inputs. Read the sums on a current
// stream only after dpt_nccl_side_join.
int dpt_nccl_local_allreduce(at::Tensor* const* tensors, size_t n, char** err) {
  DPT_GUARD(err, -1, {
    std::vector<at::Tensor> v;
    torch::cuda::nccl::stream_list streams;
    for (size_t i = 0; i < n; ++i) {
      TORCH_CHECK(tensors[i]->is_cuda(), "NCCL needs CUDA tensors; tensor ", i, " is on ", tensors[i]->device());
      v.push_back(*tensors[i]);
    }
    TORCH_CHECK(!v.empty(), "nothing to sum");
    for (const auto& t : v) {
      auto index = t.device().index();
      auto side = side_stream(index);
      // Called with the side stream current (the coordinator's bucketed path, which made it
      // wait for the hooks' own events instead), there is nothing to wait for.
      if (at::cuda::getCurrentCUDAStream(index) != side) {
        stream_wait(at::cuda::getCurrentCUDAStream(index), side);
      }
      t.record_stream(side.unwrap());
      streams.emplace_back(side);
    }
    c10::DeviceGuard guard(v[0].device());
    torch::cuda::nccl::all_reduce(v, v, static_cast<int>(torch::cuda::nccl::ncclRedOp::Sum), streams);
    return 0;
  })
}

// Makes the current stream of each tensor's GPU wait for the sums queued on that GPU's side
// stream so far (a wait on the device; the host does not wait).
int dpt_nccl_side_join(at::Tensor* const* tensors, size_t n, char** err) {
  DPT_GUARD(err, -1, {
    for (size_t i = 0; i < n; ++i) {
      TORCH_CHECK(tensors[i]->is_cuda(), "a side stream is a GPU's; tensor ", i, " is on ", tensors[i]->device());
      auto index = tensors[i]->device().index();
      stream_wait(side_stream(index), at::cuda::getCurrentCUDAStream(index));
    }
    return 0;
  })
}

// Marks a CUDA tensor as used on the calling thread's current stream of its device
// (Tensor.record_stream): once it is freed, the caching allocator gives its memory to no other
// tensor before the work queued there so far has run. For a tensor made on another thread's
// stream and read on this one.
int dpt_record_stream(at::Tensor* t, char** err) {
  DPT_GUARD(err, -1, {
    TORCH_CHECK(t->is_cuda(), "a stream is a GPU's; the tensor is on ", t->device());
    t->record_stream(at::cuda::getCurrentCUDAStream(t->device().index()).unwrap());
    return 0;
  })
}

// Makes `device`'s side stream the calling thread's current stream until the guard is freed,
// so that what is launched meanwhile (c10d's collective across the ranks, which waits for the
// current stream) is ordered after the side stream's sums.
dpt_stream_guard* dpt_side_stream_enter(int device, char** err) {
  DPT_GUARD(err, nullptr, {
    auto count = c10::cuda::device_count();
    TORCH_CHECK(device >= 0 && device < count, "no CUDA device ", device, " (this process sees ", count, ")");
    return new dpt_stream_guard{c10::StreamGuard(side_stream(static_cast<c10::DeviceIndex>(device)).unwrap())};
  })
}

// A stream of c10's pool made the calling thread's current stream on one GPU, and the stream it
// replaced (put back when freed). Only the stream changes: the thread's current device stays
// as it was (c10::cuda::setCurrentCUDAStream, unlike a StreamGuard, which sets both).
struct dpt_own_stream {
  at::cuda::CUDAStream previous;
};

// Makes a stream of c10's pool (low priority, as torch.cuda.Stream() takes) the calling
// thread's current stream on `device` until freed: a replica's work, or the coordinator's, is
// then queued on a stream of its own, never on the legacy default stream, which would order it
// against every other stream's work on the device.
dpt_own_stream* dpt_own_stream_enter(int device, char** err) {
  DPT_GUARD(err, nullptr, {
    auto count = c10::cuda::device_count();
    TORCH_CHECK(device >= 0 && device < count, "no CUDA device ", device, " (this process sees ", count, ")");
    auto index = static_cast<c10::DeviceIndex>(device);
    auto own = new dpt_own_stream{at::cuda::getCurrentCUDAStream(index)};
    c10::cuda::setCurrentCUDAStream(at::cuda::getStreamFromPool(false, index));
    return own;
  })
}

// Makes stream `stream` of `device` (an id dpt_cuda_current_stream gave inside an earlier
// dpt_own_stream_enter) the calling thread's current stream again until freed: work that
// returns to one stream of its own, such as the host copies of rewind points and checkpoints.
dpt_own_stream* dpt_own_stream_reenter(int device, int64_t stream, char** err) {
  DPT_GUARD(err, nullptr, {
    auto count = c10::cuda::device_count();
    TORCH_CHECK(device >= 0 && device < count, "no CUDA device ", device, " (this process sees ", count, ")");
    auto index = static_cast<c10::DeviceIndex>(device);
    auto named = c10::Stream::unpack3(static_cast<c10::StreamId>(stream), index, c10::DeviceType::CUDA);
    auto own = new dpt_own_stream{at::cuda::getCurrentCUDAStream(index)};
    c10::cuda::setCurrentCUDAStream(at::cuda::CUDAStream(named));
    return own;
  })
}

void dpt_own_stream_leave(dpt_own_stream* s) {
  try {
    c10::cuda::setCurrentCUDAStream(s->previous);
  } catch (...) {
  }
  delete s;
}

// The id of CUDA device `device`'s current stream on the calling thread (c10's StreamId),
// into *out: which stream a gradient hook runs on.
int dpt_cuda_current_stream(int device, int64_t* out, char** err) {
  DPT_GUARD(err, -1, {
    *out = static_cast<int64_t>(at::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).id());
    return 0;
  })
}

void dpt_side_stream_leave(dpt_stream_guard* g) {
  try {
    delete g;
  } catch (...) {
  }
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

// An event on CUDA device `device`: with timing (torch.cuda.Event(enable_timing=True)) or
// without, for ordering only (torch.cuda.Event(), cheaper to record and wait for).
static dpt_event* new_event(int device, int timing) {
  auto count = c10::cuda::device_count();
  TORCH_CHECK(device >= 0 && device < count, "no CUDA device ", device, " (this process sees ", count, ")");
  auto index = static_cast<c10::DeviceIndex>(device);
  auto flag = timing != 0 ? c10::EventFlag::BACKEND_DEFAULT : c10::EventFlag::PYTORCH_DEFAULT;
  return new dpt_event{c10::Event(c10::DeviceType::CUDA, flag), index};
}

dpt_event* dpt_cuda_event_new(int device, int timing, char** err) {
  DPT_GUARD(err, nullptr, { return new_event(device, timing); })
}

// Makes the calling thread's current stream on the event's device wait (on the device) for
// the work queued before the event's record.
int dpt_cuda_event_block(dpt_event* ev, char** err) {
  DPT_GUARD(err, -1, {
    c10::DeviceGuard guard(cuda(ev->device));
    ev->event.block(at::cuda::getCurrentCUDAStream(ev->device).unwrap());
    return 0;
  })
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

// Records the event on its device's side stream (see side_stream): it completes when the sums
// queued there so far have run.
int dpt_cuda_event_record_side(dpt_event* ev, char** err) {
  DPT_GUARD(err, -1, {
    c10::DeviceGuard guard(cuda(ev->device));
    ev->event.record(side_stream(ev->device).unwrap());
    return 0;
  })
}

// Records the event on the CUDA stream `stream` (a c10 StreamId, as dpt_cuda_current_stream
// gives) of its device: it completes when the work queued there so far has run. A stream may be
// another thread's current one: what it has queued is in the past.
int dpt_cuda_event_record_on(dpt_event* ev, int64_t stream, char** err) {
  DPT_GUARD(err, -1, {
    c10::DeviceGuard guard(cuda(ev->device));
    ev->event.record(c10::Stream::unpack3(static_cast<c10::StreamId>(stream), ev->device, c10::DeviceType::CUDA));
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

// The most bytes of tensors allocated at once on CUDA device `device` through the caching
// allocator since the process began or the peak was last reset (torch.cuda.max_memory_allocated),
// into *out; with `reset` not 0, the peak then starts again from what is allocated now
// (torch.cuda.reset_peak_memory_stats). An allocator that has not allocated yet reports 0, as
// PyTorch's does before CUDA is initialized.
int dpt_cuda_peak_bytes(int device, int reset, int64_t* out, char** err) {
  DPT_GUARD(err, -1, {
    auto count = c10::cuda::device_count();
    TORCH_CHECK(device >= 0 && device < count, "no CUDA device ", device, " (this process sees ", count, ")");
    auto index = static_cast<c10::DeviceIndex>(device);
    auto* allocator = c10::cuda::CUDACachingAllocator::get();
    if (allocator == nullptr || !allocator->initialized()) {
      *out = 0;
      return 0;
    }
    const auto stats = allocator->getDeviceStats(index);
    *out = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
    if (reset != 0) {
      allocator->resetPeakStats(index);
    }
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
