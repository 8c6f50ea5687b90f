//===- HwyCommon-inl.h - Highway helpers of the CPU kernels ----*- C++ -*-===//
//
// Lane types and small helpers shared by the Highway kernel files
// (QuantKernelsHwy.cpp, BlockKernelsHwy.cpp), compiled once per target:
// include it after hwy/highway.h inside a file that foreach_target.h
// re-includes (Highway's per-target include guard below).
//
//===----------------------------------------------------------------------===//

#if defined(KILN_CPU_HWY_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_CPU_HWY_COMMON_INL_H_
#undef KILN_CPU_HWY_COMMON_INL_H_
#else
#define KILN_CPU_HWY_COMMON_INL_H_
#endif

#include "hwy/highway.h"

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace kiln::rt::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;   // int32, as many lanes as DF
using DI8 = hn::Rebind<int8_t, DF>;  // int8, as many lanes as DF
using DU8 = hn::Rebind<uint8_t, DF>; // uint8, as many lanes as DF

/// Lanes(DF) int8 values at p widened to float (exact).
HWY_INLINE hn::Vec<DF> LoadI8AsF32(const int8_t *HWY_RESTRICT p) {
  const DF df;
  const DI di;
  const DI8 d8;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p)));
}

/// Lanes(df) bytes at p widened to int32 lanes.
HWY_INLINE hn::Vec<DI> LoadU8AsI32(const uint8_t *HWY_RESTRICT p) {
  const DI di;
  const DU8 du8;
  return hn::PromoteTo(di, hn::LoadU(du8, p));
}

#if HWY_TARGET <= HWY_AVX3
/// table[idx & 15] per lane: vpermps reads the low four bits of each index
/// (16 lanes), so 4-bit codes become floats in one instruction.
constexpr bool kHasNibbleTable = true;
HWY_INLINE hn::Vec<DF> NibbleTable(hn::Vec<DF> table, hn::Vec<DI> idx) {
  return hn::Vec<DF>{_mm512_permutexvar_ps(idx.raw, table.raw)};
}
#else
constexpr bool kHasNibbleTable = false;
HWY_INLINE hn::Vec<DF> NibbleTable(hn::Vec<DF> table, hn::Vec<DI>) {
  return table; // not called: kHasNibbleTable is false
}
#endif

/// The sum of v's lanes.
HWY_INLINE float SumLanes(hn::Vec<DF> v) {
  const DF df;
  return hn::GetLane(hn::SumOfLanes(df, v));
}

} // namespace HWY_NAMESPACE
} // namespace kiln::rt::cpu
HWY_AFTER_NAMESPACE();

#endif // per-target include guard
