// Every shim in one translation unit: parsing libtorch's headers is nearly all of their compile
// time (the optimization level changes it by a few per cent), and the files share most of
// those headers, so they are parsed once here instead of once per file. Each file stays
// self-contained and can still be compiled on its own. build.rs compiles this file only.
#include "c10d_shim.cpp"
#include "jit_shim.cpp"
#include "autograd_shim.cpp"
#include "rng_shim.cpp"
#include "flops_shim.cpp"
#include "host_shim.cpp"
#include "warn_shim.cpp"
#include "amp_shim.cpp"
#include "optim_shim.cpp"
#include "graph_shim.cpp"
#if DPT_HAVE_NCCL
#include "c10d_nccl.cpp"
#else
#include "c10d_no_nccl.cpp"
#endif
