// c10's warnings on dpt-tui's own threads: the count of the CUDA sync debug mode's warnings
// ("called a synchronizing CUDA operation") and their printing. c10 keeps one warning handler
// per thread (a thread_local in c10/util/Exception.cpp), so a handler installed on one thread
// sees nothing another thread warns of: each thread that runs CUDA work installs the counter
// for itself (dpt_count_syncs_here). Autograd's device threads gather the warnings of a
// backward pass and replay them on the thread that ran it, so a worker's counter sees those.
// Same conventions as c10d_shim.cpp: every C++ exception is caught and returned through `err`.
#include "c10d_shim.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdio>

namespace {

// The synchronizing CUDA calls warned of on every thread that counts.
std::atomic<int64_t> sync_calls{0};

bool is_sync_warning(const c10::Warning& warning) {
  return warning.msg().find("called a synchronizing CUDA operation") != std::string::npos;
}

// Counts the sync debug mode's warnings and prints each on stderr itself (c10's own printing
// is a log line, silenced where dpt-tui quiets c10's logs, as a multi-process run does); every
// other warning goes on to the handler the thread had before.
class SyncCounter : public c10::WarningHandler {
 public:
  explicit SyncCounter(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (is_sync_warning(warning)) {
      sync_calls.fetch_add(1, std::memory_order_relaxed);
      const auto& at = warning.source_location();
      std::fprintf(stderr, "[W sync debug] %s (%s at %s:%u)\n", warning.msg().c_str(), at.function,
                   at.file, at.line);
      return;
    }
    if (next_ != nullptr) {
      next_->process(warning);
    }
  }

 private:
  c10::WarningHandler* next_;
};

// Installs the counter on the calling thread, once. It is kept for the process: c10 holds a
// pointer to it, and a warning may come while the thread ends.
void count_here() {
  thread_local SyncCounter* counter = nullptr;
  if (counter == nullptr) {
    counter = new SyncCounter(c10::WarningUtils::get_warning_handler());
    c10::WarningUtils::set_warning_handler(counter);
  }
}

}  // namespace

extern "C" {

// The calling thread's warnings counted from now on (idempotent).
int dpt_count_syncs_here(char** err) {
  DPT_GUARD(err, -1, {
    count_here();
    return 0;
  })
}

// The synchronizing CUDA calls warned of on the counting threads so far, into *out.
int dpt_cuda_sync_count(int64_t* out, char** err) {
  DPT_GUARD(err, -1, {
    *out = sync_calls.load(std::memory_order_relaxed);
    return 0;
  })
}

// Raises a c10 warning with `msg` on the calling thread, as libtorch's own code does.
int dpt_warn(const char* msg, char** err) {
  DPT_GUARD(err, -1, {
    TORCH_WARN(msg);
    return 0;
  })
}

}  // extern "C"
