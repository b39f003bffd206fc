// What the shims' C++ files share: the handles behind dpt_api.h's opaque types (which declares
// every entry point) and the guard that turns every C++ exception into a message through
// `err` (a malloc'ed string the caller frees with dpt_free_string); no exception ever crosses
// into Rust.
#pragma once

#include "dpt_api.h"

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
