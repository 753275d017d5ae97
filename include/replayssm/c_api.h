/* C ABI of replayssm (libreplayssm_c.so): every op of mamba2.hpp, gdn.hpp and cursor.hpp as one C
 * function over DLPack tensors, for bindings that load the library at run time (the Python package
 * in python/replayssm loads it with ctypes, so it needs no compilation against PyTorch).
 *
 * Conventions
 * - Tensors are `const DLTensor*` viewed without a copy (replayssm::from_dlpack); a null pointer is
 *   an absent optional argument. Tensors an op writes (out, states, rings, cursors) are written in
 *   place through the same pointers: `const` is about the DLTensor descriptor only.
 * - Shapes, dtypes and semantics are exactly those of the C++ structs (see mamba2.hpp / gdn.hpp);
 *   the geometry is passed as four ints and checked against the tensors.
 * - `stream` is a cudaStream_t (null = legacy default stream), ignored for CPU tensors.
 * - Every function returns REPLAYSSM_OK (0) or an error code; then replayssm_last_error() holds the
 *   C++ message, which names the argument ("in.x: expected shape ..."); a validation failure
 *   leaves every tensor untouched.
 *   No exception crosses this boundary.
 */
#ifndef REPLAYSSM_C_API_H_
#define REPLAYSSM_C_API_H_

#include <dlpack/dlpack.h>
#include <stdint.h>

#if defined(_WIN32)
#define REPLAYSSM_C_EXPORT __declspec(dllexport)
#else
#define REPLAYSSM_C_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define REPLAYSSM_C_ABI_VERSION 1

enum {
  REPLAYSSM_OK = 0,
  REPLAYSSM_ERROR = 1,         /* replayssm::Error: a validation failure (nothing was written) or a CUDA error */
  REPLAYSSM_ERROR_INTERNAL = 2 /* any other C++ exception */
};

/* ---- library ---- */
REPLAYSSM_C_EXPORT const char* replayssm_version(void);      /* "0.1.0" */
REPLAYSSM_C_EXPORT int replayssm_c_abi_version(void);       /* REPLAYSSM_C_ABI_VERSION */
REPLAYSSM_C_EXPORT int replayssm_built_with_cuda(void);     /* 1 when the CUDA kernels are compiled in */
REPLAYSSM_C_EXPORT int replayssm_cuda_device_count(void);
/* "" when this build's CUDA kernels run on CUDA device `device`, else why not (backend.hpp: cuda_device_problem);
 * the string lives until this thread's next call of it. */
REPLAYSSM_C_EXPORT const char* replayssm_cuda_device_problem(int device);
/* Range checks of CUDA index/cursor tensors (a device-to-host copy; off by default, see cursor.hpp). */
REPLAYSSM_C_EXPORT void replayssm_set_device_validation(int on);
REPLAYSSM_C_EXPORT int replayssm_device_validation(void);
/* Programmatic dependent launch (mamba2.hpp / gdn.hpp / cursor.hpp: the ops' pdl flag) for the mamba2_decode,
 * mamba2_replay_decode, mamba2_spec_verify, mamba2_classic_spec_decode, gdn_decode, gdn_replay_decode,
 * gdn_spec_verify, advance_cursors and commit_cursors calls made from this thread; off (0) by default. */
REPLAYSSM_C_EXPORT void replayssm_set_launch_pdl(int on);
REPLAYSSM_C_EXPORT int replayssm_launch_pdl(void);
/* Message and argument name of the last failed call on this thread ("" if none). */
REPLAYSSM_C_EXPORT const char* replayssm_last_error(void);
REPLAYSSM_C_EXPORT const char* replayssm_last_error_argument(void);
/* Geometry of a production preset (geometry.hpp): {heads, headdim, dstate, groups} or
 * {k_heads, v_heads, head_k_dim, head_v_dim}. Unknown names fail, listing the known ones. */
REPLAYSSM_C_EXPORT int replayssm_mamba2_preset(const char* name, int32_t geometry[4]);
REPLAYSSM_C_EXPORT int replayssm_gdn_preset(const char* name, int32_t geometry[4]);

/* Speculative ring sizing (traffic.hpp *_best_spec_history): the history within the ring of (history, window), i.e.
 * next_pow2(history + window) entries and so no more memory, whose verify + commit moves the fewest bytes by count
 * (accepted counts uniform in 1..window). Mamba-2 rings hold the activation dtype; GDN d / k rings ring_dtype;
 * gate_width 1 (per-head gates) or head_k_dim (per-channel). GDN returns no history longer than the one given (its
 * CUDA verify holds the history in shared memory; longer ones measured slower). */
REPLAYSSM_C_EXPORT int replayssm_mamba2_best_spec_history(
    int heads, int headdim, int dstate, int groups, int history, int window,
    DLDataType state_dtype, DLDataType act_dtype, int32_t* best_history);
REPLAYSSM_C_EXPORT int replayssm_gdn_best_spec_history(
    int k_heads, int v_heads, int head_k_dim, int head_v_dim, int history, int window,
    DLDataType state_dtype, DLDataType act_dtype, DLDataType ring_dtype, int gate_width, int32_t* best_history);

/* ---- Mamba-2 (mamba2.hpp). Token inputs x, dt, B, C, z (z optional); weights A, dt_bias
 * (optional), D (optional), dt_softplus (0/1). ---- */
REPLAYSSM_C_EXPORT int replayssm_mamba2_decode(
    int heads, int headdim, int dstate, int groups,
    const DLTensor* x, const DLTensor* dt, const DLTensor* B, const DLTensor* C, const DLTensor* z,
    const DLTensor* A, const DLTensor* dt_bias, const DLTensor* D, int dt_softplus,
    const DLTensor* state, const DLTensor* slot_idx, const DLTensor* out, void* stream);

/* route: 0 = output_only, 1 = state_and_output. */
REPLAYSSM_C_EXPORT int replayssm_mamba2_replay_decode(
    int heads, int headdim, int dstate, int groups, int route,
    const DLTensor* x, const DLTensor* dt, const DLTensor* B, const DLTensor* C, const DLTensor* z,
    const DLTensor* A, const DLTensor* dt_bias, const DLTensor* D, int dt_softplus,
    const DLTensor* checkpoint, const DLTensor* x_ring, const DLTensor* dt_ring, const DLTensor* B_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* out, void* stream);

/* The small-batch route (mamba2.hpp, materialize): ring tokens 0..w-1 folded into the checkpoint; the cursor is
 * only read. Then reset_cursors() once, and mamba2_decode() with state = checkpoint is exact. */
REPLAYSSM_C_EXPORT int replayssm_mamba2_materialize(
    int heads, int headdim, int dstate, int groups, const DLTensor* A,
    const DLTensor* checkpoint, const DLTensor* x_ring, const DLTensor* dt_ring, const DLTensor* B_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, void* stream);

/* A request's current state written to dst[dst_idx[i]] (mamba2.hpp, export_state: prefix caching, forking, swap-out);
 * the cache is only read. A standard cache (cursor [slots]) or a speculative one (cursor [slots, 2]), told apart by
 * the cursor's rank. */
REPLAYSSM_C_EXPORT int replayssm_mamba2_export_state(
    int heads, int headdim, int dstate, int groups, const DLTensor* A,
    const DLTensor* checkpoint, const DLTensor* x_ring, const DLTensor* dt_ring, const DLTensor* B_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* dst, const DLTensor* dst_idx, void* stream);

REPLAYSSM_C_EXPORT int replayssm_mamba2_spec_verify(
    int heads, int headdim, int dstate, int groups, int history, int window,
    const DLTensor* x, const DLTensor* dt, const DLTensor* B, const DLTensor* C, const DLTensor* z,
    const DLTensor* A, const DLTensor* dt_bias, const DLTensor* D, int dt_softplus,
    const DLTensor* checkpoint, const DLTensor* x_ring, const DLTensor* dt_ring, const DLTensor* B_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* query_start_loc, const DLTensor* out,
    void* stream);

/* Tree speculation (mamba2.hpp, VerifyArgs::tree_parent): replayssm_mamba2_spec_verify with tree_parent [tokens] int32,
 * each window token's parent within its window (-1 at token 0; NULL: a chain). Then, per layer,
 * replayssm_mamba2_accept_tree_path (the accepted path's ring entries to w, w + 1, ..; the cursor is read) and
 * replayssm_commit_cursors once with the same num_accepted. */
REPLAYSSM_C_EXPORT int replayssm_mamba2_spec_verify_tree(
    int heads, int headdim, int dstate, int groups, int history, int window,
    const DLTensor* x, const DLTensor* dt, const DLTensor* B, const DLTensor* C, const DLTensor* z,
    const DLTensor* A, const DLTensor* dt_bias, const DLTensor* D, int dt_softplus,
    const DLTensor* checkpoint, const DLTensor* x_ring, const DLTensor* dt_ring, const DLTensor* B_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* query_start_loc, const DLTensor* tree_parent,
    const DLTensor* out, void* stream);

REPLAYSSM_C_EXPORT int replayssm_mamba2_accept_tree_path(
    int heads, int headdim, int dstate, int groups, int history, int window,
    const DLTensor* x_ring, const DLTensor* dt_ring, const DLTensor* B_ring, const DLTensor* cursor,
    const DLTensor* slot_idx, const DLTensor* query_start_loc, const DLTensor* tree_parent,
    const DLTensor* accepted_leaf, const DLTensor* num_accepted, void* stream);

REPLAYSSM_C_EXPORT int replayssm_mamba2_classic_spec_decode(
    int heads, int headdim, int dstate, int groups, int window,
    const DLTensor* x, const DLTensor* dt, const DLTensor* B, const DLTensor* C, const DLTensor* z,
    const DLTensor* A, const DLTensor* dt_bias, const DLTensor* D, int dt_softplus,
    const DLTensor* state, const DLTensor* state_indices, const DLTensor* num_accepted,
    const DLTensor* query_start_loc, const DLTensor* out, void* stream);

/* ---- Gated DeltaNet (gdn.hpp). Token inputs q, k, v, a, b; weights A_log, dt_bias, scale (0 =
 * 1/sqrt(head_k_dim)), qk_l2norm (0/1). ---- */
REPLAYSSM_C_EXPORT int replayssm_gdn_decode(
    int k_heads, int v_heads, int head_k_dim, int head_v_dim,
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* a, const DLTensor* b,
    const DLTensor* A_log, const DLTensor* dt_bias, float scale, int qk_l2norm,
    const DLTensor* state, const DLTensor* slot_idx, const DLTensor* out, void* stream);

REPLAYSSM_C_EXPORT int replayssm_gdn_replay_decode(
    int k_heads, int v_heads, int head_k_dim, int head_v_dim,
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* a, const DLTensor* b,
    const DLTensor* A_log, const DLTensor* dt_bias, float scale, int qk_l2norm,
    const DLTensor* checkpoint, const DLTensor* d_ring, const DLTensor* k_ring, const DLTensor* g_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* out, void* stream);

/* The small-batch route (gdn.hpp, materialize): ring tokens 0..w-1 folded into the checkpoint; the cursor is
 * only read. Then reset_cursors() once, and gdn_decode() with state = checkpoint is exact. */
REPLAYSSM_C_EXPORT int replayssm_gdn_materialize(
    int k_heads, int v_heads, int head_k_dim, int head_v_dim,
    const DLTensor* checkpoint, const DLTensor* d_ring, const DLTensor* k_ring, const DLTensor* g_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, void* stream);

/* As replayssm_mamba2_export_state, for Gated DeltaNet (gdn.hpp, export_state). */
REPLAYSSM_C_EXPORT int replayssm_gdn_export_state(
    int k_heads, int v_heads, int head_k_dim, int head_v_dim,
    const DLTensor* checkpoint, const DLTensor* d_ring, const DLTensor* k_ring, const DLTensor* g_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* dst, const DLTensor* dst_idx, void* stream);

REPLAYSSM_C_EXPORT int replayssm_gdn_spec_verify(
    int k_heads, int v_heads, int head_k_dim, int head_v_dim, int history, int window,
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* a, const DLTensor* b,
    const DLTensor* A_log, const DLTensor* dt_bias, float scale, int qk_l2norm,
    const DLTensor* checkpoint, const DLTensor* d_ring, const DLTensor* k_ring, const DLTensor* g_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* query_start_loc, const DLTensor* out,
    void* stream);

/* Tree speculation (gdn.hpp, VerifyArgs::tree_parent; both gate kinds, CPU and CUDA): replayssm_gdn_spec_verify
 * with tree_parent [tokens] int32, each window token's parent within its window (-1 at token 0; NULL: a chain). Then,
 * per layer, replayssm_gdn_accept_tree_path (the accepted path's ring entries to w, w + 1, ..; the cursor is read) and
 * replayssm_commit_cursors once with the same num_accepted. */
REPLAYSSM_C_EXPORT int replayssm_gdn_spec_verify_tree(
    int k_heads, int v_heads, int head_k_dim, int head_v_dim, int history, int window,
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* a, const DLTensor* b,
    const DLTensor* A_log, const DLTensor* dt_bias, float scale, int qk_l2norm,
    const DLTensor* checkpoint, const DLTensor* d_ring, const DLTensor* k_ring, const DLTensor* g_ring,
    const DLTensor* cursor, const DLTensor* slot_idx, const DLTensor* query_start_loc, const DLTensor* tree_parent,
    const DLTensor* out, void* stream);

REPLAYSSM_C_EXPORT int replayssm_gdn_accept_tree_path(
    int k_heads, int v_heads, int head_k_dim, int head_v_dim, int history, int window,
    const DLTensor* d_ring, const DLTensor* k_ring, const DLTensor* g_ring, const DLTensor* cursor,
    const DLTensor* slot_idx, const DLTensor* query_start_loc, const DLTensor* tree_parent,
    const DLTensor* accepted_leaf, const DLTensor* num_accepted, void* stream);

REPLAYSSM_C_EXPORT int replayssm_gdn_classic_spec_decode(
    int k_heads, int v_heads, int head_k_dim, int head_v_dim, int window,
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* a, const DLTensor* b,
    const DLTensor* A_log, const DLTensor* dt_bias, float scale, int qk_l2norm,
    const DLTensor* state, const DLTensor* state_indices, const DLTensor* num_accepted,
    const DLTensor* query_start_loc, const DLTensor* out, void* stream);

/* ---- cursors (cursor.hpp), shared by Mamba-2 and GDN caches ---- */
REPLAYSSM_C_EXPORT int replayssm_advance_cursors(const DLTensor* cursor, const DLTensor* slot_idx, int ring_len,
                                                 void* stream);
REPLAYSSM_C_EXPORT int replayssm_commit_cursors(const DLTensor* cursor, const DLTensor* slot_idx,
                                                const DLTensor* num_accepted, const DLTensor* query_start_loc,
                                                int history, int window, void* stream);
REPLAYSSM_C_EXPORT int replayssm_reset_cursors(const DLTensor* cursor, const DLTensor* slot_idx, void* stream);

/* Copy a prefill state into slot `slot` of a checkpoint pool, converting dtype (serving/slot_manager.hpp).
 * CPU tensors only: for CUDA tensors the caller copies. */
REPLAYSSM_C_EXPORT int replayssm_load_checkpoint(const DLTensor* checkpoint, int slot, const DLTensor* state);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* REPLAYSSM_C_API_H_ */
