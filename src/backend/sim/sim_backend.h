// The simulated device backend ("sim"): device memory in a capacity-limited arena the host
// cannot touch (sim_arena.h), ops queued on one asynchronous stream (sim_stream.h), kernels
// from the optimized CPU backend run on kernel-view translations of the tensors. Results are
// therefore bit-identical to `--backend cpu`, while the device paths of the engine (copies,
// synchronisation, memory limits) behave as on an accelerator: a host read of device memory
// faults, a missing wait is a real race, and exceeding ANVIL_SIM_MEMORY is an out-of-memory
// error. No op waits for its kernel except those that return a host value (sum_squares,
// all_finite); a kernel failure surfaces at the next synchronisation point (copy_to_host,
// sum_squares, all_finite, synchronize), and every such wait is counted (host_waits()).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/optimized/optimized_ops.h"
#include "backend/sim/sim_arena.h"
#include "backend/sim/sim_stream.h"

namespace anvil {

class SimBackend final : public Backend {
 public:
  // Creates the device with `capacity` bytes of memory.
  explicit SimBackend(size_t capacity);
  ~SimBackend() override;

  std::string name() const override { return "sim"; }
  Device device() const override { return Device{DeviceType::sim, 0}; }
  // The optimized CPU kernels run f16 activations, so the f16 device path rehearses here.
  bool supports_compute_dtype(DType dtype) const override {
    return Backend::supports_compute_dtype(dtype) || dtype == DType::f16;
  }
  void synchronize() override;
  // Events on the op stream; the default create_stream (a worker thread) is the communication
  // stream, reaching device memory at its kernel-view addresses.
  std::unique_ptr<Event> record_event() override;
  // Stamped when the op stream reaches it (the simulated device's clock is the host's).
  std::unique_ptr<TimingEvent> record_timing_event() override;
  void wait_event(const Event& event) override;
  void* host_address(const void* device_ptr) const override {
    return arena_.kernel_address(device_ptr);
  }

  // Counts a blocking wait of the host on the op stream made outside the backend's own calls
  // (a timing event read before the stream reached it).
  void note_host_wait() { count_host_wait(); }
  // Returns the arena (capacity and use, for tests and descriptions).
  const sim::SimArena& arena() const { return arena_; }
  // Queues a task on the stream behind every op issued so far. Test-only: it lets a test hold
  // the stream (e.g. on a promise) to show that ops return before they run.
  void enqueue_for_test(std::function<void()> task) { stream_.enqueue(std::move(task)); }
  // Returns how many copies between host memory and the device were issued (test-only: the
  // device collectives must make none).
  size_t host_transfers_for_test() const { return host_transfers_.load(); }
  // Returns how many of them were copies to the host on the op stream, each of which blocks
  // the host until every op queued before it has run (test-only).
  size_t blocking_reads_for_test() const { return blocking_reads_.load(); }
  // Returns the number of queued or running tasks (test-only, racy by nature).
  size_t pending_for_test() const { return stream_.pending(); }
  // Calls `hook` on the host thread just before each blocking wait on the stream (test-only:
  // with the stream held, it sees everything the host queued before it first had to wait).
  void set_before_wait_for_test(std::function<void()> hook) { before_wait_ = std::move(hook); }
  // Returns how many attention_forward and attention_backward ops have been queued so far
  // (test-only: each layer's forward queues one, its backward one).
  std::pair<int64_t, int64_t> queued_attention_for_test() const {
    return {queued_attention_forward_.load(), queued_attention_backward_.load()};
  }

 protected:
  void* do_allocate(size_t bytes) override;
  void do_deallocate(void* ptr, size_t bytes) override;
  void copy_from_host_kernel(const Tensor& dst, const void* src) override;
  void copy_to_host_kernel(void* dst, const Tensor& src) override;
  void copy_kernel(const Tensor& dst, const Tensor& src) override;
  void fill_zero_kernel(const Tensor& t) override;
  void matmul_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                     bool transpose_b, float alpha, float beta) override;
  void embedding_forward_kernel(const Tensor& ids, const Tensor& table,
                                const Tensor& out) override;
  void embedding_backward_kernel(const Tensor& ids, const Tensor& dout,
                                 const Tensor& dtable) override;
  void embedding_shard_forward_kernel(const Tensor& ids, const Tensor& table, const Tensor& out,
                                      int64_t begin) override;
  void embedding_shard_backward_kernel(const Tensor& ids, const Tensor& dout,
                                       const Tensor& dtable, int64_t begin) override;
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
  void dropout_kernel(const Tensor& x, const Tensor& out, float p, uint64_t seed) override;
  void cross_entropy_kernel(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                            int ignore_index, const Tensor& losses, const Tensor* dlogits,
                            float grad_scale) override;
  void cross_entropy_shard_stats_kernel(const Tensor& logits, const Tensor& targets,
                                        int ignore_index, int64_t begin,
                                        const Tensor& stats) override;
  void cross_entropy_shard_backward_kernel(const Tensor& logits, const Tensor& targets,
                                           const Tensor* loss_mask, int ignore_index,
                                           int64_t begin, const Tensor& lse,
                                           const Tensor& dlogits, float grad_scale) override;
  void adamw_step_kernel(std::span<const AdamWTensors> sets,
                         const AdamWParams& params) override;
  void sum_to_double_kernel(const Tensor& x, const Tensor& result) override;
  double sum_squares_kernel(const Tensor& x) override;
  bool all_finite_kernel(const Tensor& x) override;
  void accumulate_exact_squares_kernel(const Tensor& x, const Tensor& counters) override;

 private:
  // Returns t as the kernels see it: a host tensor over the kernel view of its memory.
  Tensor kernel_view(const Tensor& t) const;
  // Queues a task; run_and_wait also waits for it, rethrowing its failure.
  void run(std::function<void()> task) { stream_.enqueue(std::move(task)); }
  void run_and_wait(std::function<void()> task);
  // Waits for every task queued so far (calling the test hook first).
  void wait_for_stream();

  // The optimized kernels' scratch (widened GEMM operands, row buffers): device memory of
  // this backend, counted as its workspace and bounded by its capacity, handed to the kernels
  // at its kernel-view address (they run on the host side of the arena).
  class KernelScratch final : public Allocator {
   public:
    explicit KernelScratch(SimBackend& backend) : backend_(backend) {}
    Device device() const override { return {}; }

   protected:
    void* do_allocate(size_t bytes) override;
    void do_deallocate(void* ptr, size_t bytes) override;

   private:
    SimBackend& backend_;
  };

  sim::SimArena arena_;
  std::atomic<size_t> host_transfers_{0};
  std::atomic<size_t> blocking_reads_{0};
  std::atomic<int64_t> queued_attention_forward_{0};
  std::atomic<int64_t> queued_attention_backward_{0};
  std::function<void()> before_wait_;
  KernelScratch scratch_{*this};
  // Used only by the stream's worker thread (OptimizedOps is not thread-safe).
  cpu_opt::OptimizedOps ops_{scratch_};
  // Declared last: destroyed first, so the worker drains before the arena and ops go away.
  sim::SimStream stream_;
};

}  // namespace anvil
