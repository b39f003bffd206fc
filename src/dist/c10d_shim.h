// dpt-tui's C++ shim over libtorch's c10d (the engine under torch.distributed): a flat C API of
// opaque handles for src/dist/c10d/ (mod.rs, cuda.rs, jit.rs). Every entry point catches every C++ exception and
// returns its message through `err` (a malloc'ed string the caller frees with
// dpt_free_string); no exception ever crosses into Rust.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstdlib>
#include <cstring>
#include <exception>

struct dpt_store {
  c10::intrusive_ptr<c10d::Store> p;
};
struct dpt_group {
  c10::intrusive_ptr<c10d::Backend> p;
};
struct dpt_work {
  c10::intrusive_ptr<c10d::Work> p;
};

// A CUDA event with timing (defined in c10d_nccl.cpp; opaque elsewhere).
struct dpt_event;

inline char* dpt_strdup(const char* s) {
  size_t n = std::strlen(s) + 1;
  char* out = static_cast<char*>(std::malloc(n));
  if (out != nullptr) {
    std::memcpy(out, s, n);
  }
  return out;
}

// Runs `body`; on a C++ exception stores its message in *err and returns `fail`.
#define DPT_GUARD(err, fail, body)                      \
  try {                                                 \
    body                                                \
  } catch (const c10::Error& e) {                       \
    *(err) = dpt_strdup(e.what_without_backtrace());    \
    return fail;                                        \
  } catch (const std::exception& e) {                   \
    *(err) = dpt_strdup(e.what());                      \
    return fail;                                        \
  } catch (...) {                                       \
    *(err) = dpt_strdup("unknown C++ exception");       \
    return fail;                                        \
  }
