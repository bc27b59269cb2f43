// The CUDA backend: device memory from a caching allocator over cudaMalloc (never managed
// memory), one non-blocking stream on which every copy and kernel is queued in order (so a
// block freed to the cache and handed out again is only touched after earlier work), pinned
// staging for host transfers, cuBLASLt GEMMs, and one kernel file per op (cuda_ops.h).
// Attention runs on cuDNN, tensor-core or CUDA-core kernels, chosen per call
// (attention_route.h). Every op's arguments are checked on the host by Backend before anything
// is launched; ids and targets are checked by the caller before upload, never read back. Only
// the ops that return a host value (sum_squares, all_finite), copy_to_host, synchronize, waits
// on events and copy streams, and an upload that finds its staging chunk in flight block the
// host (each counted in host_waits()); all others return with the work queued. Per-op scratch
// (RMSNorm partials, GEMM staging, reduction partials, attention's workspace) lives in
// grow-only workspace owned here, so once a training step has run, later steps allocate
// nothing (source_allocations() stops growing).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cuda_stream.h"
#include "core/buffer.h"

namespace anvil {

namespace cuda {
class AttentionRouter;
}

class CudaBackend final : public Backend {
 public:
  // Uses device `device_index`; throws "[cuda] no CUDA device (...)" when there is none.
  explicit CudaBackend(int device_index = 0);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  // Returns the allocator's counters (bytes in use, peak, cached, cudaMalloc calls).
  cuda::AllocatorStats memory_stats() const { return allocator_->stats(); }
  // Returns the stream every op of this backend is queued on.
  cudaStream_t stream() const { return stream_->get(); }
  void* native_stream() const override { return stream(); }
  int64_t source_allocations() const override { return memory_stats().source_allocations; }
  // Returns cudaMemGetInfo's free bytes plus the blocks the caching allocator holds for reuse.
  int64_t free_device_memory() const;
  // Returns the number of SMs of the device (sizes the grids of the one-launch reductions).
  int sm_count() const { return sm_count_; }

  Device device() const override { return Device{DeviceType::cuda, device_index_}; }

  void synchronize() override;
  // Real cudaEvents on the compute stream; create_stream gives a CudaCopyStream.
  std::unique_ptr<Event> record_event() override;
  // A timed cudaEvent on the compute stream, read on the trace's clock.
  std::unique_ptr<TimingEvent> record_timing_event() override;
  void wait_event(const Event& event) override;
  std::unique_ptr<Stream> create_stream() override;
  // Returns a timed cudaEvent recorded now on the compute stream: the device time between two
  // of them is cuda::elapsed_seconds(start, end) (the kernel benchmark's timer).
  std::unique_ptr<cuda::CudaBackendEvent> record_timed_event();

 protected:
  void copy_from_host_kernel(const Tensor& dst, const void* src) override;
  void copy_to_host_kernel(void* dst, const Tensor& src) override;
  void copy_kernel(const Tensor& dst, const Tensor& src) override;
  void fill_zero_kernel(const Tensor& t) override;

  void matmul_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                     bool transpose_b, float alpha, float beta) override;
  void embedding_forward_kernel(const Tensor& ids, const Tensor& table, const Tensor& out) override;
  void embedding_backward_kernel(const Tensor& ids, const Tensor& dout,
                                 const Tensor& dtable) override;
  void embedding_shard_forward_kernel(const Tensor& ids, const Tensor& table, const Tensor& out,
                                      int64_t begin) override;
  void embedding_shard_backward_kernel(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                                       int64_t begin) override;
  void rmsnorm_forward_kernel(const Tensor& x, const Tensor& weight, const Tensor& out,
                              const Tensor& rstd, float eps) override;
  void add_rmsnorm_forward_kernel(const Tensor& a, const Tensor& b, const Tensor& sum,
                                  const Tensor& weight, const Tensor& out, const Tensor& rstd,
                                  float eps) override;
  void rmsnorm_backward_kernel(const Tensor& dout, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                               const Tensor* dx_copy) override;
  void rope_forward_kernel(const Tensor& x, const Tensor& out, const Tensor& positions,
                           const RopeParams& params) override;
  void rope_backward_kernel(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                            const RopeParams& params) override;
  void attention_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse,
                                const AttentionParams& params) override;
  void attention_backward_kernel(const Tensor& dout, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& out, const Tensor& lse,
                                 const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 const AttentionParams& params) override;
  void attention_merge_kernel(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                              const Tensor& part_lse) override;
  void swiglu_forward_kernel(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void swiglu_backward_kernel(const Tensor& dout, const Tensor& gate, const Tensor& up,
                              const Tensor& dgate, const Tensor& dup) override;
  void add_kernel(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void scale_kernel(const Tensor& x, float alpha) override;
  void axpy_kernel(float alpha, const Tensor& x, const Tensor& y) override;
  void cast_kernel(const Tensor& src, const Tensor& dst) override;
  void cross_entropy_kernel(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                            int ignore_index, const Tensor& losses, const Tensor* dlogits,
                            float grad_scale) override;
  void cross_entropy_shard_stats_kernel(const Tensor& logits, const Tensor& targets,
                                        int ignore_index, int64_t begin,
                                        const Tensor& stats) override;
  void cross_entropy_shard_backward_kernel(const Tensor& logits, const Tensor& targets,
                                           const Tensor* loss_mask, int ignore_index, int64_t begin,
                                           const Tensor& lse, const Tensor& dlogits,
                                           float grad_scale) override;
  void adamw_step_kernel(std::span<const AdamWTensors> sets,
                         const AdamWParams& params) override;
  void dropout_kernel(const Tensor& x, const Tensor& out, float p, uint64_t seed) override;
  void sum_to_double_kernel(const Tensor& x, const Tensor& result) override;
  double sum_squares_kernel(const Tensor& x) override;
  bool all_finite_kernel(const Tensor& x) override;
  void accumulate_exact_squares_kernel(const Tensor& x, const Tensor& counters) override;

 protected:
  // Blocks of the caching allocator, counted by Allocator (the requested bytes; the cache's
  // size-class rounding and the blocks it keeps are in memory_stats()).
  void* do_allocate(size_t bytes) override;
  void do_deallocate(void* ptr, size_t bytes) override;

 private:
  class DeviceMemory;
  class TimingEventImpl;
  // Grow-only device scratch: a call that needs more replaces it with a larger block (freed
  // to the cache, stream-ordered); otherwise the same block serves every call.
  class GrowOnlyScratch {
   public:
    // Returns at least `bytes` of device memory, valid until a later call asks for more.
    void* reserve(Allocator& allocator, size_t bytes);

   private:
    Buffer buffer_;
  };

  // Returns the callback that counts one host wait (for events, streams and staging).
  cuda::HostWaitCounter host_wait_counter();
  // Returns the device copy of RoPE's inverse frequencies for this head_dim and params.
  const float* rope_frequencies(int64_t head_dim, const RopeParams& params);
  // Copies `bytes` of device memory at `src` into host `dst` after the queued work.
  void read_back(void* dst, const void* src, size_t bytes);
  void rope(const char* op, const Tensor& in, const Tensor& out, const Tensor& positions,
            const RopeParams& params, float direction);

  int device_index_ = 0;
  int sm_count_ = 1;
  std::unique_ptr<DeviceMemory> device_memory_;
  std::unique_ptr<cuda::CachingAllocator> allocator_;
  std::unique_ptr<cuda::CudaStream> stream_;
  std::unique_ptr<cuda::PinnedStaging> staging_;
  std::unique_ptr<cuda::PinnedBuffer> readback_;
  std::unique_ptr<cuda::CublasLtGemm> gemm_;
  // Small device scratch for reductions' results (workspace, held for good).
  void* scalars_ = nullptr;
  // The anchor of the timing events of the current profile window (record_timing_event).
  std::shared_ptr<const cuda::CudaBackendEvent> timing_anchor_;
  int64_t timing_anchor_ns_ = 0;
  uint64_t timing_session_ = 0;
  // The RMSNorm backward's ticket counters, zeroed once (each launch leaves them zero).
  unsigned* rmsnorm_counters_ = nullptr;
  // RoPE inverse frequencies per (head_dim, params), cached for good (workspace).
  std::map<std::pair<int64_t, std::string>, void*> rope_frequencies_;
  // Per-op workspace (declared after the allocator: released before it).
  GrowOnlyScratch rmsnorm_scratch_;
  GrowOnlyScratch gemm_staging_;
  GrowOnlyScratch reduction_scratch_;
  // Attention's path choice, cuDNN plans and grow-only workspace; made on the first attention
  // call. Declared last: destroyed first, while the allocator it returns memory to still exists.
  std::shared_ptr<cuda::AttentionRouter> attention_;
};

}  // namespace anvil
