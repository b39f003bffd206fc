// CUDA graphs of one replica's work (at::cuda::CUDAGraph, what torch.cuda.CUDAGraph wraps):
// captured from the calling thread's current stream, which must not be the default one, in
// thread-local mode (a process with one thread per replica: another thread's CUDA calls do not
// break the capture), into a memory pool of the graph's own. A capture that fails (an operation
// that syncs or is not capturable) is abandoned: the stream leaves capture mode, the allocators
// stop routing to the pool and the graph is made new, so the replica can go on eagerly.
// Built without CUDA headers, each entry refuses with a message.
#include "c10d_shim.h"

#if DPT_HAVE_NCCL
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <memory>

struct dpt_graph {
  c10::DeviceIndex device;
  c10::MempoolId_t pool;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  // Between capture_begin and a capture_end that succeeded.
  bool capturing = false;
  // A capture ended: the graph can be replayed.
  bool captured = false;
};

// Takes the stream out of a capture that failed and the allocators off its pool; a fresh graph
// and pool replace the old ones. Only libtorch's and c10's own entry points are called (the
// binary does not link the CUDA runtime itself). Each step is best effort: a failed capture can
// leave CUDA and the allocators at any point of their sequence (CUDAGraph.cpp's reset() says as
// much).
static void abandon_capture(dpt_graph* g) {
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, g->device));
  bool routed = false;
  if (g->capturing) {
    // capture_end's cudaStreamEndCapture ends the stream's capture, valid or not; for one that
    // failed it throws before taking the allocators off the pool (and c10's check clears the
    // error it read).
    try {
      g->graph->capture_end();
    } catch (...) {
      routed = true;
    }
  }
  if (routed) {
    try {
      c10::cuda::CUDACachingAllocator::endAllocateToPool(g->device, g->pool);
    } catch (...) {
    }
    try {
      at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(g->pool);
    } catch (...) {
    }
  }
  // A capture that ended gives its pool back here (CUDAGraph's reset()).
  g->graph.reset();
  if (routed) {
    try {
      c10::cuda::CUDACachingAllocator::releasePool(g->device, g->pool);
    } catch (...) {
    }
    try {
      at::getHostAllocator(at::kCUDA)->release_pool(g->pool);
    } catch (...) {
    }
  }
  g->capturing = false;
  g->captured = false;
  g->pool = at::cuda::graph_pool_handle();
  g->graph = std::make_unique<at::cuda::CUDAGraph>();
}

extern "C" {

dpt_graph* dpt_cuda_graph_new(int device, char** err) {
  DPT_GUARD(err, nullptr, {
    int count = static_cast<int>(at::cuda::device_count());
    TORCH_CHECK(device >= 0 && device < count, "CUDA graphs need a CUDA device: cuda:", device,
                " is not one of the ", count, " this process sees");
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
    auto g = std::make_unique<dpt_graph>();
    g->device = static_cast<c10::DeviceIndex>(device);
    g->pool = at::cuda::graph_pool_handle();
    g->graph = std::make_unique<at::cuda::CUDAGraph>();
    return g.release();
  })
}

int dpt_cuda_graph_capture_begin(dpt_graph* g, char** err) {
  DPT_GUARD(err, -1, {
    TORCH_CHECK(!g->capturing && !g->captured, "this graph holds a capture already");
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, g->device));
    g->graph->capture_begin(g->pool, cudaStreamCaptureModeThreadLocal);
    g->capturing = true;
    return 0;
  })
}

int dpt_cuda_graph_capture_end(dpt_graph* g, char** err) {
  DPT_GUARD(err, -1, {
    TORCH_CHECK(g->capturing, "no capture under way");
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, g->device));
    g->graph->capture_end();
    g->capturing = false;
    g->captured = true;
    return 0;
  })
}

int dpt_cuda_graph_abandon(dpt_graph* g, char** err) {
  DPT_GUARD(err, -1, {
    abandon_capture(g);
    return 0;
  })
}

int dpt_cuda_graph_replay(dpt_graph* g, char** err) {
  DPT_GUARD(err, -1, {
    TORCH_CHECK(g->captured, "replay of a graph not captured");
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, g->device));
    g->graph->replay();
    return 0;
  })
}

void dpt_cuda_graph_free(dpt_graph* g) {
  try {
    if (g->capturing) {
      abandon_capture(g);
    }
  } catch (...) {
  }
  delete g;
}

}  // extern "C"

#else

struct dpt_graph {};

extern "C" {

dpt_graph* dpt_cuda_graph_new(int, char** err) {
  *err = dpt_strdup("CUDA graphs need a CUDA build: this dpt-tui was built without CUDA headers");
  return nullptr;
}

int dpt_cuda_graph_capture_begin(dpt_graph*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_graph_capture_end(dpt_graph*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_graph_abandon(dpt_graph*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_graph_replay(dpt_graph*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

void dpt_cuda_graph_free(dpt_graph*) {}

}  // extern "C"

#endif
