// Stands in for c10d_nccl.cpp when the wheel's CUDA or NCCL headers are missing: the same entry
// points, each failing with a message that says why.
#include "c10d_shim.h"

extern "C" {

dpt_group* dpt_nccl_group(dpt_store*, int, int, int64_t, char** err) {
  *err = dpt_strdup("this dpt-tui was built without NCCL (the libtorch it was built against lacks CUDA headers)");
  return nullptr;
}

int dpt_nccl_local_allreduce(at::Tensor* const*, size_t, char** err) {
  *err = dpt_strdup("this dpt-tui was built without NCCL (the libtorch it was built against lacks CUDA headers)");
  return -1;
}

int dpt_nccl_side_join(at::Tensor* const*, size_t, char** err) {
  *err = dpt_strdup("this dpt-tui was built without NCCL (the libtorch it was built against lacks CUDA headers)");
  return -1;
}

dpt_stream_guard* dpt_side_stream_enter(int, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return nullptr;
}

void dpt_side_stream_leave(dpt_stream_guard*) {}

dpt_own_stream* dpt_own_stream_enter(int, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return nullptr;
}

dpt_own_stream* dpt_own_stream_reenter(int, int64_t, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return nullptr;
}

void dpt_own_stream_leave(dpt_own_stream*) {}

int dpt_record_stream(at::Tensor*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_event_record_on(dpt_event*, int64_t, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_sync_debug(int, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_current_stream(int, int64_t*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_identity(int, int*, int*, int*, int*, int*, uint8_t*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

dpt_event* dpt_cuda_event_new(int, int, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return nullptr;
}

int dpt_cuda_event_block(dpt_event*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_event_record(dpt_event*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_event_record_side(dpt_event*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_event_query(dpt_event*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

int dpt_cuda_event_elapsed_ms(dpt_event*, dpt_event*, float*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

void dpt_cuda_event_free(dpt_event*) {}

int dpt_cuda_peak_bytes(int, int, int64_t*, char** err) {
  *err = dpt_strdup("this dpt-tui was built without CUDA headers");
  return -1;
}

}  // extern "C"
