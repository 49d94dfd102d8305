// xgrad/ops/isa.hpp — float32 kernels compiled once per CPU path and picked per call.
//
// Internal: include from op implementation files (.cpp) only.
//   XGRAD_ISA_KERNEL(name, (params), (args))
// defines `void name(params)` that runs `name##_body(args)` compiled for the path
// xgrad::cpu_path() selects (framework/runtime.hpp): AVX-512 (x86-64-v4), AVX2 + FMA
// (x86-64-v3) or the baseline the library is built for. name##_body must be declared
// XGRAD_FASTMATH_INLINE (always inlined), together with everything it calls that should
// use the wider vectors: it is then compiled inside each variant for that variant's ISA.
// XGRAD_CPU_PATH (or set_cpu_path) forces a lower path on any machine, so every path is
// tested on whatever CPU runs the suite. On other compilers or targets only the baseline
// variant exists and cpu_path() never reports another; XGRAD_ISA_SELECT(name) then names
// name##_baseline alone.
#pragma once
#include "xgrad/framework/runtime.hpp"
#include "xgrad/ops/fastmath.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define XGRAD_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#define XGRAD_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))
namespace xgrad::detail {
template <class F>
F isa_select(F avx512, F avx2, F baseline) {
  switch (cpu_path()) {
    case CpuPath::Avx512: return avx512;
    case CpuPath::Avx2: return avx2;
    default: return baseline;
  }
}
}  // namespace xgrad::detail
// XGRAD_ISA_SELECT(name): name##_avx512, name##_avx2 or name##_baseline, for cpu_path(); for
// hand-written variants (intrinsics) that XGRAD_ISA_KERNEL cannot generate from one body.
#define XGRAD_ISA_SELECT(name) ::xgrad::detail::isa_select(name##_avx512, name##_avx2, name##_baseline)
#define XGRAD_ISA_KERNEL(name, params, args)                           \
  XGRAD_TARGET_AVX512 void name##_avx512 params { name##_body args; } \
  XGRAD_TARGET_AVX2 void name##_avx2 params { name##_body args; }     \
  void name##_baseline params { name##_body args; }                   \
  void name params { return XGRAD_ISA_SELECT(name) args; }
#else
#define XGRAD_ISA_SELECT(name) name##_baseline
#define XGRAD_ISA_KERNEL(name, params, args)           \
  void name##_baseline params { name##_body args; } \
  void name params { name##_baseline args; }
#endif
