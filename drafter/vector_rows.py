"""MLX's CUDA vector attention kernels, every row of a causal block in one launch.

MLX sends a query of 1 to 3 rows to its vector kernels (mlx/backend/cuda/
scaled_dot_product_attention.cu, MLX 0.32) and a longer one to cuDNN or to unfused
attention. A width-8 verify therefore ran as 3 vector calls a layer
(drafter/attention.py: `chunked_attention`), each with its key slice, plus the
transposes and the concatenation that join them: 13 graph nodes a layer where one
kernel would do.

The kernels below are MLX's, copied as written there, launched over all N rows:
block (head, row, batch) computes one query row. MLX takes the one-pass kernel
(`kernel_sdpav_1pass`) up to VECTOR_TWO_PASS_KEYS keys and the two-pass pair
(`kernel_sdpav_2pass_1`, `_2`) past them. Nothing in a row's arithmetic depends on
how many rows share the launch: the warps (the two-pass kernel's 32 blocks of 8)
read keys in a fixed interleave up to the row's causal limit (key j is used when
j <= kL - qL + row) and skip the rest, so a verify row's keys, their order and every
rounding step are those of the one-row classic step over the same context, provided
the row takes the variant that step takes: `causal_rows` sends each row to the one
its own key count picks, so a block that straddles the line is two launches (the
chunks, which pick per chunk, computed the rows just under the line with the
two-pass kernel where a classic step uses the one-pass one). The kernels are compiled
without fast math, as MLX's are (its CMake sets none; NVRTC and nvcc contract
a * b + c alike), so the rows come out bit for bit as the vector kernels' do
(scripts/h200/vector_rows.py checks it on the device: every row of random blocks
on both sides of the line, then greedy decoding).

The query may be any strided view (the strides travel with the launch, as in MLX's
own call); the output is written row-major, (B, N, H, D), which is the layout the
vector kernel gives a step and the one mlx-lm's transpose and reshape read without
a copy.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import mlx.core as mx

from drafter.device import on_cuda

VECTOR_ROWS = 3  # MLX's CUDA vector kernel serves 1 to 3 query rows (supports_sdpa_vector)
VECTOR_TWO_PASS_KEYS = 1024  # past this many keys it takes its two-pass variant
# (sdpa_vector_fallback in mlx/backend/cuda/scaled_dot_product_attention.cu, MLX 0.32)
HEAD_DIMS = (64, 96, 128)  # the head sizes MLX's vector kernel is built for
THREADS = 1024  # 32 warps a block: BN = 32 keys in flight, BD = 32 lanes
BLOCKS = 32  # the two-pass kernel's blocks a row
TWO_PASS_THREADS = 8 * 32  # its first pass: 8 warps a block, BN = 8 keys in flight

# What both kernels' warps do for one row (MLX writes it out in each): read the query,
# then every `key_step`-th key up to the row's causal limit, with an online softmax,
# and leave each warp's max and sum in shared memory.
SCAN = """
  #pragma unroll
  for (int i = 0; i < v_per_thread; i++) {
    q[i] = scale_log2 * static_cast<U>(Qp[(v_per_thread * lane_idx + i) * Q_strides[3]]);
  }
  #pragma unroll
  for (int i = 0; i < v_per_thread; i++) {
    o[i] = 0.f;
  }

  U max_score = Limits<U>::finite_min();
  U sum_exp_score = 0.f;

  for (int i = kv_seq_idx; i < kL; i += key_step) {
    bool use_key = i <= (kL - qL + q_seq_idx);
    if (use_key) {
      #pragma unroll
      for (int j = 0; j < v_per_thread; j++) {
        k[j] = Kp[(v_per_thread * lane_idx + j) * K_strides[3]];
      }
      U score = 0.f;
      #pragma unroll
      for (int j = 0; j < v_per_thread; j++) {
        score += q[j] * k[j];
      }
      score = cg::reduce(warp, score, cg::plus<U>());

      U new_max = max(max_score, score);
      U factor = exp2f(max_score - new_max);
      U exp_score = exp2f(score - new_max);
      max_score = new_max;
      sum_exp_score = sum_exp_score * factor + exp_score;

      #pragma unroll
      for (int j = 0; j < v_per_thread; j++) {
        o[j] = o[j] * factor +
            exp_score * static_cast<U>(Vp[(v_per_thread * lane_idx + j) * V_strides[3]]);
      }
    }
    Kp += inner_k_stride;
    Vp += inner_v_stride;
  }

  if (lane_idx == 0) {
    max_scores[warp_idx] = max_score;
    sum_exp_scores[warp_idx] = sum_exp_score;
  }
  block.sync();
"""

# The last step of the one-pass kernel and of the two-pass pair's second (MLX writes it
# out in each): the 32 warps' outputs, rescaled by `factor`, summed across warps by
# one warp reduction per element, divided by the row's sum, and written out.
JOIN = """
  #pragma unroll
  for (int i = 0; i < v_per_thread; i++) {
    outputs[lane_idx][warp_idx] = o[i];
    block.sync();
    U ot = outputs[warp_idx][lane_idx] * factor;
    o[i] = cg::reduce(warp, ot, cg::plus<U>()) * sum_exp_score;
    block.sync();
  }

  if (lane_idx == 0) {
    #pragma unroll
    for (int i = 0; i < v_per_thread; i++) {
      Op[v_per_thread * warp_idx + i] = static_cast<T>(o[i]);
    }
  }
"""

# MLX's kernel_sdpav_1pass, its parameters read from the launch's shapes and strides
# (Q: (B, H, qL, D), K and V: (B, H_kv, kL, D)); `SCALE` is a float literal.
ONE_PASS = (
    """
  constexpr int BN = 32;
  constexpr int BD = 32;
  constexpr int v_per_thread = D / BD;
  typedef float U;

  const int qL = Q_shape[2];
  const int kL = K_shape[2];
  const int gqa_factor = Q_shape[1] / K_shape[1];
  constexpr int key_step = BN;  // a warp's next key
  const int64_t inner_k_stride = BN * K_strides[2];
  const int64_t inner_v_stride = BN * V_strides[2];

  U q[v_per_thread];
  U k[v_per_thread];
  U o[v_per_thread];

  __shared__ U outputs[BN][BD + 1];
  __shared__ U max_scores[BN];
  __shared__ U sum_exp_scores[BN];

  // MLX: params.scale (a float) * M_LOG2E (a double), rounded to float
  const U scale_log2 = static_cast<double>(SCALE) * 1.44269504088896340736;

  auto block = cg::this_thread_block();
  auto warp = cg::tiled_partition<32>(block);
  const int lane_idx = warp.thread_rank();
  const int warp_idx = warp.meta_group_rank();

  const int batch_idx = blockIdx.z;
  const int head_idx = blockIdx.x;
  const int kv_head_idx = head_idx / gqa_factor;
  const int q_seq_idx = blockIdx.y;
  const int kv_seq_idx = warp_idx;

  const T* Qp = Q + batch_idx * Q_strides[0] + head_idx * Q_strides[1] +
      q_seq_idx * Q_strides[2];
  const T* Kp = K + batch_idx * K_strides[0] + kv_head_idx * K_strides[1] +
      kv_seq_idx * K_strides[2];
  const T* Vp = V + batch_idx * V_strides[0] + kv_head_idx * V_strides[1] +
      kv_seq_idx * V_strides[2];
  // (B, qL, H, D), row-major
  T* Op = O + (int64_t(batch_idx) * qL + q_seq_idx) * gridDim.x * D + head_idx * D;

"""
    + SCAN
    + """
  max_score = max_scores[lane_idx];
  U new_max = cg::reduce(warp, max_score, cg::greater<U>());
  U factor = exp2f(max_score - new_max);
  sum_exp_score = cg::reduce(warp, sum_exp_scores[lane_idx] * factor, cg::plus<U>());
  sum_exp_score = sum_exp_score == 0 ? 0 : __frcp_rn(sum_exp_score);

"""
    + JOIN
)

# MLX's kernel_sdpav_2pass_1: block (head, row, batch * BLOCKS + b) reduces keys
# 8b + w, 8b + w + 256, ... (warp w) into one partial output, its sum and its max.
TWO_PASS_1 = (
    """
  constexpr int BN = 8;
  constexpr int BD = 32;
  constexpr int blocks = 32;
  constexpr int v_per_thread = D / BD;
  typedef float U;

  const int qL = Q_shape[2];
  const int kL = K_shape[2];
  const int H = Q_shape[1];
  const int gqa_factor = Q_shape[1] / K_shape[1];
  constexpr int key_step = blocks * BN;  // a warp's next key
  const int64_t inner_k_stride = blocks * BN * K_strides[2];
  const int64_t inner_v_stride = blocks * BN * V_strides[2];

  U q[v_per_thread];
  U k[v_per_thread];
  U o[v_per_thread];

  __shared__ U outputs[BN][BD + 1];
  __shared__ U max_scores[BN];
  __shared__ U sum_exp_scores[BN];

  // MLX: params.scale * 1.44269504089f, in float here
  const U scale_log2 = SCALE * 1.44269504089f;

  auto block = cg::this_thread_block();
  auto warp = cg::tiled_partition<32>(block);
  const int lane_idx = warp.thread_rank();
  const int warp_idx = warp.meta_group_rank();

  const int batch_idx = blockIdx.z / blocks;
  const int block_idx = blockIdx.z % blocks;
  const int head_idx = blockIdx.x;
  const int kv_head_idx = head_idx / gqa_factor;
  const int q_seq_idx = blockIdx.y;
  const int kv_seq_idx = block_idx * BN + warp_idx;

  const T* Qp = Q + batch_idx * Q_strides[0] + head_idx * Q_strides[1] +
      q_seq_idx * Q_strides[2];
  const T* Kp = K + batch_idx * K_strides[0] + kv_head_idx * K_strides[1] +
      kv_seq_idx * K_strides[2];
  const T* Vp = V + batch_idx * V_strides[0] + kv_head_idx * V_strides[1] +
      kv_seq_idx * V_strides[2];

  // (B, H, qL, blocks), and D more for the partial outputs
  const int64_t p_offset = ((int64_t(batch_idx) * H + head_idx) * qL + q_seq_idx) * blocks +
      block_idx;
  float* Pp = partials + p_offset * D;
  float* Sp = sums + p_offset;
  float* Mp = maxs + p_offset;

"""
    + SCAN
    + """
  max_score = (lane_idx < BN) ? max_scores[lane_idx] : -1e9;
  U new_max = cg::reduce(warp, max_score, cg::greater<U>());
  U factor = exp2f(max_score - new_max);
  sum_exp_score = (lane_idx < BN) ? sum_exp_scores[lane_idx] : 0.f;
  sum_exp_score = cg::reduce(warp, sum_exp_score * factor, cg::plus<U>());

  if (warp_idx == 0) {
    Sp[0] = sum_exp_score;
    Mp[0] = new_max;
  }

  auto ff = exp2f(max_scores[warp_idx] - new_max);
  #pragma unroll
  for (int i = 0; i < v_per_thread; i++) {
    outputs[warp_idx][lane_idx] = o[i] * ff;
    block.sync();
    if (warp_idx == 0) {
      U ot = outputs[0][lane_idx];
      #pragma unroll
      for (int j = 1; j < BN; j++) {
        ot += outputs[j][lane_idx];
        warp.sync();
      }
      o[i] = ot;
    }
    block.sync();
  }

  if (warp_idx == 0) {
    #pragma unroll
    for (int i = 0; i < v_per_thread; i++) {
      Pp[v_per_thread * lane_idx + i] = o[i];
    }
  }
"""
)

# MLX's kernel_sdpav_2pass_2: block (head, row, batch) joins a row's 32 partials.
TWO_PASS_2 = (
    """
  constexpr int BN = 32;
  constexpr int BD = 32;
  constexpr int blocks = 32;
  constexpr int v_per_thread = D / BD;
  typedef float U;

  const int H = partials_shape[1];
  const int qL = partials_shape[2];

  U o[v_per_thread];
  __shared__ U outputs[BN][BD + 1];

  auto block = cg::this_thread_block();
  auto warp = cg::tiled_partition<32>(block);
  const int lane_idx = warp.thread_rank();
  const int warp_idx = warp.meta_group_rank();

  const int batch_idx = blockIdx.z;
  const int head_idx = blockIdx.x;
  const int q_seq_idx = blockIdx.y;

  const int64_t p_offset = ((int64_t(batch_idx) * H + head_idx) * qL + q_seq_idx) * blocks;
  const float* Pp = partials + p_offset * D + warp_idx * D;
  const float* Sp = sums + p_offset;
  const float* Mp = maxs + p_offset;
  // (B, qL, H, D), row-major
  T* Op = O + (int64_t(batch_idx) * qL + q_seq_idx) * H * D + head_idx * D;

  U max_score = Mp[lane_idx];
  U new_max = cg::reduce(warp, max_score, cg::greater<U>());
  U factor = exp2f(max_score - new_max);
  U sum_exp_score = cg::reduce(warp, Sp[lane_idx] * factor, cg::plus<U>());
  sum_exp_score = sum_exp_score == 0 ? 0 : __frcp_rn(sum_exp_score);

  #pragma unroll
  for (int i = 0; i < v_per_thread; i++) {
    o[i] = Pp[v_per_thread * lane_idx + i];
  }

"""
    + JOIN
)

HEADER = "#include <cooperative_groups/reduce.h>\n"


@cache
def available() -> bool:
    """Whether this MLX can launch custom CUDA kernels on the default device (asked
    once: each verify asks for every layer)."""
    return on_cuda() and hasattr(mx.fast, "cuda_kernel")


def scale_literal(scale: float) -> str:
    """`scale` as MLX's kernel gets it (a float: rounded to float32), written as an
    exact CUDA hexadecimal float literal."""
    return float(mx.array(scale, mx.float32).item()).hex() + "f"


@cache
def kernels(scale: float) -> tuple[Any, Any, Any]:
    """The one-pass kernel and the two-pass pair for one attention scale, a literal in
    their source (custom kernels take no float arguments; a scale is fixed per model)."""
    literal = scale_literal(scale)

    def build(name: str, inputs: list[str], outputs: list[str], source: str) -> Any:
        return mx.fast.cuda_kernel(
            name=f"draftwise_sdpav_{name}",
            input_names=inputs,
            output_names=outputs,
            source=source.replace("SCALE", literal),
            header=HEADER,
            ensure_row_contiguous=False,
        )

    return (
        build("1pass", ["Q", "K", "V"], ["O"], ONE_PASS),
        build("2pass_1", ["Q", "K", "V"], ["partials", "sums", "maxs"], TWO_PASS_1),
        build("2pass_2", ["partials", "sums", "maxs"], ["O"], TWO_PASS_2),
    )


def fits(queries: mx.array, keys: mx.array, values: mx.array) -> bool:
    """Whether MLX's vector kernels are built for this block (head sizes, dtypes)."""
    D = queries.shape[3]
    return (
        D in HEAD_DIMS
        and keys.shape[3] == D
        and values.shape[3] == D
        and queries.dtype == keys.dtype == values.dtype
        and queries.dtype in (mx.float16, mx.bfloat16, mx.float32)
    )


def one_pass_rows(rows: int, keys: int) -> int:
    """How many of a causal block's first rows read at most VECTOR_TWO_PASS_KEYS keys
    (row i of `rows` over `keys` reads keys - rows + i + 1 of them)."""
    return max(0, min(rows, VECTOR_TWO_PASS_KEYS - keys + rows))


def causal_rows(queries: mx.array, keys: mx.array, values: mx.array, scale: float) -> mx.array:
    """Bottom-right causal attention of queries (B, H, N, D) over keys and values
    (B, H_kv, kL, D), each row by the variant MLX's vector kernel takes for its key
    count; returns (B, H, N, D), a transposed view of a row-major (B, N, H, D) result.
    Call only where `fits`."""
    N, kL = queries.shape[2], keys.shape[2]
    split = one_pass_rows(N, kL)
    if split == N:
        out = one_pass(queries, keys, values, scale)
    elif split == 0:
        out = two_pass(queries, keys, values, scale)
    else:  # rows [0, split) over the keys of row split - 1, the rest over all
        end = kL - N + split
        below = one_pass(queries[:, :, :split], keys[..., :end, :], values[..., :end, :], scale)
        out = mx.concatenate([below, two_pass(queries[:, :, split:], keys, values, scale)], axis=1)
    return out.transpose(0, 2, 1, 3)


def one_pass(queries: mx.array, keys: mx.array, values: mx.array, scale: float) -> mx.array:
    """MLX's one-pass kernel over every row: (B, N, H, D)."""
    B, H, N, D = queries.shape
    (out,) = kernels(scale)[0](
        inputs=[queries, keys, values],
        template=[("T", queries.dtype), ("D", D)],
        grid=(H * THREADS, N, B),
        threadgroup=(THREADS, 1, 1),
        output_shapes=[(B, N, H, D)],
        output_dtypes=[queries.dtype],
    )
    return out


def two_pass(queries: mx.array, keys: mx.array, values: mx.array, scale: float) -> mx.array:
    """MLX's two-pass kernels over every row: (B, N, H, D)."""
    B, H, N, D = queries.shape
    _, first, second = kernels(scale)
    partials, sums, maxs = first(
        inputs=[queries, keys, values],
        template=[("T", queries.dtype), ("D", D)],
        grid=(H * TWO_PASS_THREADS, N, B * BLOCKS),
        threadgroup=(TWO_PASS_THREADS, 1, 1),
        output_shapes=[(B, H, N, BLOCKS, D), (B, H, N, BLOCKS), (B, H, N, BLOCKS)],
        output_dtypes=[mx.float32] * 3,
    )
    (out,) = second(
        inputs=[partials, sums, maxs],
        template=[("T", queries.dtype), ("D", D)],
        grid=(H * THREADS, N, B),
        threadgroup=(THREADS, 1, 1),
        output_shapes=[(B, N, H, D)],
        output_dtypes=[queries.dtype],
    )
    return out
