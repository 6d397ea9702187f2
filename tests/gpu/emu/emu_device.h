/* emu_device.h - the device side of CUDA C++ for the emulator: force-included
 * (-include) into every kernel file after tests/gpu/emu/cu2emu.c has
 * rewritten its launches and __shared__ declarations, and compiled by the
 * host C++ compiler with per-access hooks (-fsanitize=kernel-address, the
 * hooks are emu_mem.c's, no sanitizer runtime).
 *
 * What the rewriter produces and this header supplies:
 *   k<<<g, b, s, st>>>(a...)   emu::launch<k>(EMU_SITE, g, b, s, st)(a...)
 *   __shared__ T v[N];         auto &v = emu::shared<T[N]>(EMU_SHKEY, "v", EMU_SITE);
 *   extern __shared__ T v[];   T *const v = emu::dyn_shared<T>(EMU_SITE);
 * Everything else (qualifiers, built-in variables, warp intrinsics,
 * atomics, __ldg, integer and float intrinsics) is a macro or an inline
 * function here. An intrinsic not listed is a compile error, not a guess.
 */
#ifndef MOSHID_EMU_DEVICE_H
#define MOSHID_EMU_DEVICE_H

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include <cuda_runtime_api.h>

#include "emu.h"

/* ---- qualifiers ------------------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* A __shared__ the rewriter did not see (in a macro, at file scope). */
#define __shared__ EMU_SHARED_DECLARATION_NOT_REWRITTEN_BY_CU2EMU

#define EMU_SITE (emu_site{__FILE__, __LINE__})
/* One key per __shared__ declaration and template instantiation: a lambda's
 * static is distinct in each instantiation of the enclosing template. */
#define EMU_SHKEY ([]() -> const void * { static const char k_ = 0; return &k_; }())
#define EMU_NOSAN __attribute__((no_sanitize_address))

/* ---- built-in variables --------------------------------------------------------- */
#define threadIdx (emu_thread_idx())
#define blockIdx (emu_block_idx())
#define blockDim (emu_block_dim())
#define gridDim (emu_grid_dim())
#define warpSize 32

namespace emu {

/* ---- launches -------------------------------------------------------------- */

/* Offsets of each parameter in the packed buffer, as CUDA packs them; the
 * last entry is the size. */
template <class... P>
constexpr std::array<size_t, sizeof...(P) + 1> param_layout() {
    std::array<size_t, sizeof...(P) + 1> o{};
    size_t cur = 0, i = 0;
    ((cur = (cur + alignof(P) - 1) / alignof(P) * alignof(P), o[i++] = cur, cur += sizeof(P)), ...);
    o[i] = cur;
    return o;
}

template <auto F, class Sig = decltype(F)>
struct kernel;

template <auto F, class... A>
struct kernel<F, void (*)(A...)> {
    static constexpr auto off = param_layout<std::decay_t<A>...>();
    static constexpr size_t bytes = off[sizeof...(A)];

    /* Runs in every fiber: copies each parameter out of the buffer, as a
     * GPU thread reads its kernel parameters (not hooked: the buffer is the
     * runtime's). */
    template <size_t... I>
    EMU_NOSAN static void call(const unsigned char *p, std::index_sequence<I...>) {
        F(*reinterpret_cast<const std::decay_t<A> *>(p + off[I])...);
    }
    EMU_NOSAN static void thunk(const unsigned char *p) { call(p, std::index_sequence_for<A...>{}); }

    template <size_t... I, class... V>
    static void pack(unsigned char *buf, std::index_sequence<I...>, V &&...v) {
        ((void)new (buf + off[I]) std::decay_t<A>(std::forward<V>(v)), ...);
    }
    static const char *name() { return __PRETTY_FUNCTION__; }
};

template <auto F>
struct launcher {
    emu_site site;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;

    template <class... V>
    void operator()(V &&...v) const {
        using K = kernel<F>;
        static_assert(K::off.size() == sizeof...(V) + 1, "wrong number of kernel arguments");
        alignas(16) unsigned char buf[K::bytes ? K::bytes : 1];
        K::pack(buf, std::index_sequence_for<V...>{}, std::forward<V>(v)...);
        emu_call c = {(const void *)F, K::name(), &K::thunk, buf, K::bytes, grid, block, shmem, stream, site};
        emu_launch(&c);
    }
};

template <auto F>
launcher<F> launch(emu_site site, dim3 grid, dim3 block, size_t shmem = 0, cudaStream_t stream = 0) {
    return launcher<F>{site, grid, block, shmem, stream};
}

/* ---- shared memory ------------------------------------------------------------ */

/* The block's object for one __shared__ declaration (Align: its __align__). */
template <class T, size_t Align = 0>
T &shared(const void *key, const char *name, emu_site site) {
    static_assert(std::is_trivially_destructible<T>::value, "__shared__ objects are not constructed");
    constexpr size_t a = Align > alignof(T) ? Align : alignof(T);
    return *static_cast<T *>(emu_shared_var(key, sizeof(T), a > 16 ? a : 16,
                                            sizeof(std::remove_all_extents_t<T>), name, site));
}

template <class T>
T *dyn_shared(emu_site site) {
    return static_cast<T *>(emu_dyn_shared(site));
}

/* ---- warp-synchronous ops -------------------------------------------------------- */

template <class T>
inline uint64_t bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp ops move at most 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof v);
    return b;
}
template <class T>
inline T unbits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof v);
    return v;
}
/* A shuffle's lane (or delta, or xor mask) and width, from the intrinsic's
 * optional last argument. */
struct wshape { int arg, width; };
inline wshape shape(int arg, int width = 32) { return {arg, width}; }
template <class T>
inline T shfl(emu_wop op, emu_site s, unsigned mask, T v, wshape w) {
    return unbits<T>(emu_warp(op, mask, bits(v), (int)sizeof(T), w.arg, w.width, nullptr, s));
}
template <class T>
inline unsigned match_any(emu_site s, unsigned mask, T v) {
    return (unsigned)emu_warp(EMU_W_MATCH_ANY, mask, bits(v), (int)sizeof(T), 0, 32, nullptr, s);
}
template <class T>
inline unsigned match_all(emu_site s, unsigned mask, T v, int *pred) {
    int p = 0;
    unsigned r = (unsigned)emu_warp(EMU_W_MATCH_ALL, mask, bits(v), (int)sizeof(T), 0, 32, &p, s);
    if (pred) *pred = p;
    return r;
}
inline unsigned vote(emu_wop op, emu_site s, unsigned mask, int pred) {
    return (unsigned)emu_warp(op, mask, pred != 0, 4, 0, 32, nullptr, s);
}
template <class T>
inline T reduce(emu_wop uop, emu_wop sop, emu_site s, unsigned mask, T v) {
    static_assert(std::is_integral<T>::value && sizeof(T) == 4, "__reduce_*_sync takes 32-bit integers");
    emu_wop op = std::is_signed<T>::value ? sop : uop;
    return (T)emu_warp(op, mask, (uint64_t)(int64_t)v, 4, 0, 32, nullptr, s);
}

/* ---- loads and atomics --------------------------------------------------------------- */

template <class T>
EMU_NOSAN inline T ldg(emu_site s, const T *p) {
    emu_access(p, sizeof(T), EMU_LOAD | EMU_LDG, s);
    return *p;
}

/* __ldcg: a global load cached in L2 only (on a device it skips a stale L1
 * line: what a block reads of another block's stores after their
 * publication); here a load, checked and counted once. */
template <class T>
EMU_NOSAN inline T ldcg(emu_site s, const T *p) {
    emu_access(p, sizeof(T), EMU_LOAD, s);
    return *p;
}

/* Atomics run as plain read-modify-writes: a fiber is never preempted
 * inside one, so each is atomic; the address is checked first (alignment,
 * address space, bounds, initialised). */
template <class T, class Op>
EMU_NOSAN inline T atomic(emu_site s, T *p, Op op) {
    emu_access(p, sizeof(T), EMU_LOAD | EMU_STORE | EMU_ATOMIC, s);
    T old = *p;
    *p = op(old);
    return old;
}
/* The atomics of the device library; each returns the old value. */
template <class T, class V>
inline T atomic_add(emu_site s, T *p, V v) { return atomic(s, p, [&](T o) { return (T)(o + (T)v); }); }
template <class T, class V>
inline T atomic_sub(emu_site s, T *p, V v) { return atomic(s, p, [&](T o) { return (T)(o - (T)v); }); }
template <class T, class V>
inline T atomic_exch(emu_site s, T *p, V v) { return atomic(s, p, [&](T) { return (T)v; }); }
template <class T, class V>
inline T atomic_min(emu_site s, T *p, V v) { return atomic(s, p, [&](T o) { return (T)v < o ? (T)v : o; }); }
template <class T, class V>
inline T atomic_max(emu_site s, T *p, V v) { return atomic(s, p, [&](T o) { return (T)v > o ? (T)v : o; }); }
template <class T, class V>
inline T atomic_and(emu_site s, T *p, V v) { return atomic(s, p, [&](T o) { return (T)(o & (T)v); }); }
template <class T, class V>
inline T atomic_or(emu_site s, T *p, V v) { return atomic(s, p, [&](T o) { return (T)(o | (T)v); }); }
template <class T, class V>
inline T atomic_xor(emu_site s, T *p, V v) { return atomic(s, p, [&](T o) { return (T)(o ^ (T)v); }); }
template <class T, class C, class V>
inline T atomic_cas(emu_site s, T *p, C c, V v) {
    return atomic(s, p, [&](T o) { return o == (T)c ? (T)v : o; });
}
/* atomicInc/atomicDec: wrap at v (unsigned int only, as on the device). */
inline unsigned atomic_inc(emu_site s, unsigned *p, unsigned v) {
    return atomic(s, p, [&](unsigned o) { return o >= v ? 0u : o + 1u; });
}
inline unsigned atomic_dec(emu_site s, unsigned *p, unsigned v) {
    return atomic(s, p, [&](unsigned o) { return (o == 0u || o > v) ? v : o - 1u; });
}

}  // namespace emu

/* ---- intrinsics -------------------------------------------------------------------------- */
#define __syncthreads() ((void)emu_syncthreads(0, 0, EMU_SITE))
#define __syncthreads_count(p) emu_syncthreads(1, (p) != 0, EMU_SITE)
#define __syncthreads_and(p) emu_syncthreads(2, (p) != 0, EMU_SITE)
#define __syncthreads_or(p) emu_syncthreads(3, (p) != 0, EMU_SITE)
#define __syncwarp(...) ((void)emu_warp(EMU_W_SYNC, emu_syncwarp_mask_(__VA_ARGS__), 0, 4, 0, 32, nullptr, EMU_SITE))
static inline unsigned emu_syncwarp_mask_(unsigned m = 0xFFFFFFFFu) { return m; }
#define __threadfence() emu_threadfence()
#define __threadfence_block() ((void)0)
#define __trap() emu_trap(EMU_SITE)
/* __nanosleep: a poll's back-off. Nothing to wait for here: blocks run one
 * at a time, so a poll not satisfied at once never is, and the launch's
 * timeout (emu_set_timeout_ms) ends it. */
static inline void __nanosleep(unsigned ns) { (void)ns; }
#define clock64() emu_clock()

#define __shfl_sync(m, v, ...) emu::shfl(EMU_W_SHFL_IDX, EMU_SITE, (m), (v), emu::shape(__VA_ARGS__))
#define __shfl_up_sync(m, v, ...) emu::shfl(EMU_W_SHFL_UP, EMU_SITE, (m), (v), emu::shape(__VA_ARGS__))
#define __shfl_down_sync(m, v, ...) emu::shfl(EMU_W_SHFL_DOWN, EMU_SITE, (m), (v), emu::shape(__VA_ARGS__))
#define __shfl_xor_sync(m, v, ...) emu::shfl(EMU_W_SHFL_XOR, EMU_SITE, (m), (v), emu::shape(__VA_ARGS__))
#define __ballot_sync(m, p) emu::vote(EMU_W_BALLOT, EMU_SITE, (m), (p))
#define __any_sync(m, p) ((int)emu::vote(EMU_W_ANY, EMU_SITE, (m), (p)))
#define __all_sync(m, p) ((int)emu::vote(EMU_W_ALL, EMU_SITE, (m), (p)))
#define __match_any_sync(m, v) emu::match_any(EMU_SITE, (m), (v))
#define __match_all_sync(m, v, pred) emu::match_all(EMU_SITE, (m), (v), (pred))
#define __reduce_add_sync(m, v) emu::reduce(EMU_W_ADD, EMU_W_ADD, EMU_SITE, (m), (v))
#define __reduce_min_sync(m, v) emu::reduce(EMU_W_MIN_U, EMU_W_MIN_S, EMU_SITE, (m), (v))
#define __reduce_max_sync(m, v) emu::reduce(EMU_W_MAX_U, EMU_W_MAX_S, EMU_SITE, (m), (v))
#define __reduce_and_sync(m, v) emu::reduce(EMU_W_AND, EMU_W_AND, EMU_SITE, (m), (v))
#define __reduce_or_sync(m, v) emu::reduce(EMU_W_OR, EMU_W_OR, EMU_SITE, (m), (v))
#define __reduce_xor_sync(m, v) emu::reduce(EMU_W_XOR, EMU_W_XOR, EMU_SITE, (m), (v))

#define __ldg(p) emu::ldg(EMU_SITE, (p))
#define __ldcg(p) emu::ldcg(EMU_SITE, (p))

#define atomicAdd(p, v) emu::atomic_add(EMU_SITE, (p), (v))
#define atomicSub(p, v) emu::atomic_sub(EMU_SITE, (p), (v))
#define atomicExch(p, v) emu::atomic_exch(EMU_SITE, (p), (v))
#define atomicMin(p, v) emu::atomic_min(EMU_SITE, (p), (v))
#define atomicMax(p, v) emu::atomic_max(EMU_SITE, (p), (v))
#define atomicAnd(p, v) emu::atomic_and(EMU_SITE, (p), (v))
#define atomicOr(p, v) emu::atomic_or(EMU_SITE, (p), (v))
#define atomicXor(p, v) emu::atomic_xor(EMU_SITE, (p), (v))
#define atomicCAS(p, c, v) emu::atomic_cas(EMU_SITE, (p), (c), (v))
#define atomicInc(p, v) emu::atomic_inc(EMU_SITE, (p), (v))
#define atomicDec(p, v) emu::atomic_dec(EMU_SITE, (p), (v))

/* Bits and integers. */
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
static inline double __longlong_as_double(long long u) { double f; std::memcpy(&f, &u, 8); return f; }
static inline long long __double_as_longlong(double f) { long long u; std::memcpy(&u, &f, 8); return u; }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline unsigned int __brev(unsigned int x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}

/* Floats: the IEEE operations the device does without --use_fast_math. */
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
/* Never contracted into an fma (nvcc's promise for the _rn intrinsics). The
 * host compiler contracts a * b + c under -ffp-contract=fast, GCC's default
 * in the GNU modes these files are built in, so the result goes through a
 * volatile. */
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

/* min/max of the device library (fminf/fmaxf for floating point). */
template <class A, class B>
static inline std::common_type_t<A, B> min(A a, B b) {
    using T = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point<T>::value) return std::fmin((T)a, (T)b);
    else return (T)a < (T)b ? (T)a : (T)b;
}
template <class A, class B>
static inline std::common_type_t<A, B> max(A a, B b) {
    using T = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point<T>::value) return std::fmax((T)a, (T)b);
    else return (T)a > (T)b ? (T)a : (T)b;
}

#endif
