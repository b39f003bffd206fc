// Every entry point of dpt-tui's C++ shims over libtorch, as one flat C API of opaque handles
// (as torch-sys's torch_api.h declares libtch's). Each .cpp file includes this header, so the
// compiler checks its definitions against these declarations, and tests/ffi_header.rs checks
// the Rust `extern "C"` blocks (src/c10d/) against it. Every function that can fail takes
// `char** err` and on failure stores a malloc'ed message there (freed with dpt_free_string);
// no C++ exception crosses into Rust.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
namespace at {
class Tensor;
}
typedef at::Tensor dpt_tensor;
extern "C" {
#else
typedef struct dpt_tensor dpt_tensor;
#endif

typedef struct dpt_store dpt_store;
typedef struct dpt_group dpt_group;
typedef struct dpt_work dpt_work;
typedef struct dpt_event dpt_event;
typedef struct dpt_stream_guard dpt_stream_guard;
typedef struct dpt_own_stream dpt_own_stream;
typedef struct dpt_graph dpt_graph;
typedef struct dpt_module dpt_module;
typedef struct dpt_rng_scope dpt_rng_scope;
typedef struct dpt_flops dpt_flops;
typedef struct dpt_autocast dpt_autocast;

// Rust's side of a gradient hook: takes over `grad` (an owned handle) and returns 0 (the
// gradient goes on as it is), 2 (Rust kept its values: a zero stand-in of 4 bytes goes on in
// its place, so the backward pass holds no second copy), or 1 with a malloc'ed message in
// *message, which then fails the backward pass.
typedef int (*dpt_grad_fn)(void* ctx, dpt_tensor* grad, char** message);
// Frees a hook's `ctx` once the hook is gone.
typedef void (*dpt_drop_fn)(void* ctx);


// Strings and bytes the shim allocates; c10 logging; stores, process groups and their work (c10d_shim.cpp).
void dpt_free_string(char* s);
int dpt_cuda_set_device(int device, char** err);
void dpt_free_bytes(uint8_t* b);
void dpt_set_c10_log_level(int level);
dpt_store* dpt_tcp_store(const char* host, uint16_t port, int world_size, int is_server, int64_t timeout_ms, char** err);
dpt_store* dpt_prefix_store(const char* prefix, dpt_store* base, char** err);
void dpt_store_free(dpt_store* s);
int dpt_store_set(dpt_store* s, const char* key, const uint8_t* data, size_t len, char** err);
int dpt_store_get(dpt_store* s, const char* key, uint8_t** out, size_t* len, char** err);
int64_t dpt_store_add(dpt_store* s, const char* key, int64_t value, char** err);
int dpt_store_wait(dpt_store* s, const char* const* keys, size_t n, int64_t timeout_ms, char** err);
int dpt_store_check(dpt_store* s, const char* const* keys, size_t n, char** err);
dpt_group* dpt_gloo_group(dpt_store* s, int rank, int size, int64_t timeout_ms, char** err);
void dpt_group_free(dpt_group* g);
dpt_work* dpt_allreduce(dpt_group* g, dpt_tensor* const* tensors, size_t n, int op, char** err);
dpt_work* dpt_broadcast(dpt_group* g, dpt_tensor* const* tensors, size_t n, int root, char** err);
dpt_work* dpt_reduce(dpt_group* g, dpt_tensor* const* tensors, size_t n, int root, char** err);
int dpt_work_wait(dpt_work* w, int64_t timeout_ms, char** err);
void dpt_work_free(dpt_work* w);

// c10's warnings on the calling thread: the sync debug mode's counted (warn_shim.cpp).
int dpt_count_syncs_here(char** err);
int dpt_cuda_sync_count(int64_t* out, char** err);
int dpt_warn(const char* msg, char** err);

// Host memory (host_shim.cpp).
dpt_tensor* dpt_empty_bytes(const int64_t* sizes, size_t n, int pinned, char** err);

// CUDA and NCCL (c10d_nccl.cpp; c10d_no_nccl.cpp, built without NCCL, refuses each with a message).
dpt_group* dpt_nccl_group(dpt_store* s, int rank, int size, int64_t timeout_ms, char** err);
int dpt_nccl_local_allreduce(dpt_tensor* const* tensors, size_t n, char** err);
int dpt_nccl_side_join(dpt_tensor* const* tensors, size_t n, char** err);
int dpt_record_stream(dpt_tensor* t, char** err);
dpt_stream_guard* dpt_side_stream_enter(int device, char** err);
void dpt_side_stream_leave(dpt_stream_guard* g);
dpt_own_stream* dpt_own_stream_enter(int device, char** err);
dpt_own_stream* dpt_own_stream_reenter(int device, int64_t stream, char** err);
void dpt_own_stream_leave(dpt_own_stream* s);
int dpt_cuda_current_stream(int device, int64_t* out, char** err);
int dpt_cuda_sync_debug(int mode, char** err);
int dpt_cuda_identity(int device, int* major, int* minor, int* pci_domain, int* pci_bus, int* pci_device, uint8_t* uuid, char** err);
dpt_event* dpt_cuda_event_new(int device, int timing, char** err);
int dpt_cuda_event_block(dpt_event* ev, char** err);
int dpt_cuda_event_record(dpt_event* ev, char** err);
int dpt_cuda_event_record_side(dpt_event* ev, char** err);
int dpt_cuda_event_record_on(dpt_event* ev, int64_t stream, char** err);
int dpt_cuda_event_query(dpt_event* ev, char** err);
int dpt_cuda_event_elapsed_ms(dpt_event* earlier, dpt_event* later, float* ms, char** err);
void dpt_cuda_event_free(dpt_event* ev);
int dpt_cuda_peak_bytes(int device, int reset, int64_t* out, char** err);

// CUDA graphs of a replica's work (graph_shim.cpp; refused without CUDA headers or a device).
dpt_graph* dpt_cuda_graph_new(int device, char** err);
int dpt_cuda_graph_capture_begin(dpt_graph* g, char** err);
int dpt_cuda_graph_capture_end(dpt_graph* g, char** err);
int dpt_cuda_graph_abandon(dpt_graph* g, char** err);
int dpt_cuda_graph_replay(dpt_graph* g, char** err);
void dpt_cuda_graph_free(dpt_graph* g);

// TorchScript modules (jit_shim.cpp).
dpt_module* dpt_jit_load(const char* path, int cuda_index, char** err);
void dpt_jit_free(dpt_module* module);
size_t dpt_jit_named(dpt_module* module, int buffers, char*** names, dpt_tensor*** tensors, char** err);
void dpt_free_array(void* array);
int dpt_jit_set_train(dpt_module* module, int on, char** err);
size_t dpt_jit_forward(dpt_module* module, dpt_tensor* const* inputs, size_t n, dpt_tensor*** outputs, char** err);
int dpt_jit_forward_inputs(dpt_module* module, char** err);
int dpt_jit_save(dpt_module* module, const char* path, char** err);
int dpt_jit_uses_randomness(dpt_module* module, char** err);

// Per-thread random generators (rng_shim.cpp).
dpt_rng_scope* dpt_rng_open(uint64_t seed, int cuda_index, char** err);
void dpt_rng_close(dpt_rng_scope* scope);

// FLOPs of the operators the calling thread runs (flops_shim.cpp).
dpt_flops* dpt_flops_open(char** err);
double dpt_flops_total(dpt_flops* counter);
void dpt_flops_close(dpt_flops* counter);

// Autocast scopes and TF32 (amp_shim.cpp).
dpt_autocast* dpt_autocast_enter(int cuda, int half, char** err);
void dpt_autocast_leave(dpt_autocast* scope);
int dpt_autocast_state(int cuda, int* dtype);
int dpt_set_tf32(int on, char** err);
int dpt_tf32_state(int cudnn);

// Fused optimizer steps (optim_shim.cpp).
int dpt_fused_adam(dpt_tensor* const* params, dpt_tensor* const* grads, dpt_tensor* const* exp_avgs, dpt_tensor* const* exp_avg_sqs, dpt_tensor* const* steps, size_t n, double lr, dpt_tensor* lr_tensor, double beta1, double beta2, double weight_decay, double eps, int decoupled, dpt_tensor* grad_scale, dpt_tensor* found_inf, char** err);
int dpt_fused_sgd(dpt_tensor* const* params, dpt_tensor* const* grads, dpt_tensor* const* momentum_buffers, size_t n, double lr, dpt_tensor* lr_tensor, double momentum, double weight_decay, int nesterov, int first_step, dpt_tensor* grad_scale, dpt_tensor* found_inf, char** err);

// Gradient hooks (autograd_shim.cpp).
int dpt_on_grad(dpt_tensor* leaf, dpt_grad_fn fn, void* ctx, dpt_drop_fn drop, char** err);

#ifdef __cplusplus
}  // extern "C"
#endif
