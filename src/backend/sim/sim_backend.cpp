// SimBackend: each kernel translates its tensors to the arena's kernel view when it is queued
// and runs the optimized CPU op on the stream's worker. Tensors, parameters and the bytes of a
// host upload are captured by value, so the caller may reuse everything once a call returns.
#include "backend/sim/sim_backend.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/registry.h"
#include "backend/worker_stream.h"
#include "core/error.h"
#include "core/trace.h"

namespace anvil {
namespace {

// The device memory when ANVIL_SIM_MEMORY is not set.
constexpr const char* kDefaultMemory = "4GiB";

size_t configured_capacity() {
  const char* env = std::getenv("ANVIL_SIM_MEMORY");
  return sim::parse_byte_size(env && *env ? env : kDefaultMemory, "ANVIL_SIM_MEMORY");
}

}  // namespace

SimBackend::SimBackend(size_t capacity) : arena_(capacity) {}

SimBackend::~SimBackend() {
  // Work still queued refers to buffers being freed around us; let it finish first. A kernel
  // failure nobody synchronised on is dropped here: destructors must not throw.
  try {
    stream_.wait();
  } catch (const std::exception&) {
  }
}

void* SimBackend::do_allocate(size_t bytes) { return arena_.allocate(bytes); }

// Freeing needs no wait: every access to device memory runs on the stream in issue order, so
// a block handed out again is only touched after the work that used it.
void SimBackend::do_deallocate(void* ptr, size_t) { arena_.deallocate(ptr); }

void SimBackend::synchronize() {
  count_host_wait();
  wait_for_stream();
}

void SimBackend::wait_for_stream() {
  if (before_wait_) before_wait_();
  stream_.wait();
}

std::unique_ptr<Event> SimBackend::record_event() {
  auto event = std::make_unique<FlagEvent>();
  stream_.enqueue(event->completer(), true);
  return event;
}

namespace {

// Stamped by a task of the op stream when the stream reaches it (the simulated device's time).
class SimTimingEvent final : public TimingEvent {
 public:
  explicit SimTimingEvent(SimBackend& backend) : backend_(backend) {}
  // Returns the task that stamps the event.
  std::function<void()> stamper() {
    return [time = time_, complete = flag_.completer()] {
      time->store(TraceRecorder::now_ns());
      complete();
    };
  }
  int64_t device_time_ns() override {
    if (!flag_.done()) {
      backend_.note_host_wait();
      flag_.synchronize();
    }
    return time_->load();
  }

 private:
  SimBackend& backend_;
  FlagEvent flag_;
  std::shared_ptr<std::atomic<int64_t>> time_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace

std::unique_ptr<TimingEvent> SimBackend::record_timing_event() {
  auto event = std::make_unique<SimTimingEvent>(*this);
  stream_.enqueue(event->stamper(), true);
  return event;
}

void SimBackend::wait_event(const Event& event) {
  if (event.done()) return;
  if (auto* flag = dynamic_cast<const FlagEvent*>(&event)) {
    stream_.enqueue([copy = *flag] { copy.synchronize(); }, true);
  } else {
    event.synchronize();
  }
}

void* SimBackend::KernelScratch::do_allocate(size_t bytes) {
  return backend_.arena_.kernel_address(backend_.allocate(bytes, MemoryCategory::workspace));
}

void SimBackend::KernelScratch::do_deallocate(void* ptr, size_t bytes) {
  backend_.deallocate(backend_.arena_.device_address(ptr), bytes, MemoryCategory::workspace);
}

Tensor SimBackend::kernel_view(const Tensor& t) const {
  return Tensor(arena_.kernel_address(t.data), t.dtype, t.shape, Device{});
}

void SimBackend::run_and_wait(std::function<void()> task) {
  stream_.enqueue(std::move(task));
  wait_for_stream();
}

void SimBackend::copy_from_host_kernel(const Tensor& dst, const void* src) {
  ++host_transfers_;
  // Staged now, so the host buffer may change as soon as this returns.
  auto staged = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(src),
                                                       static_cast<const uint8_t*>(src) +
                                                           dst.nbytes());
  run([d = kernel_view(dst), staged] { std::memcpy(d.data, staged->data(), staged->size()); });
}

void SimBackend::copy_to_host_kernel(void* dst, const Tensor& src) {
  ++host_transfers_;
  ++blocking_reads_;
  run_and_wait([dst, s = kernel_view(src)] { std::memcpy(dst, s.data, s.nbytes()); });
}

void SimBackend::copy_kernel(const Tensor& dst, const Tensor& src) {
  run([d = kernel_view(dst), s = kernel_view(src)] { std::memmove(d.data, s.data, d.nbytes()); });
}

void SimBackend::fill_zero_kernel(const Tensor& t) {
  run([k = kernel_view(t)] { std::memset(k.data, 0, k.nbytes()); });
}

void SimBackend::matmul_kernel(const Tensor& a, const Tensor& b, const Tensor& c,
                               bool transpose_a, bool transpose_b, float alpha, float beta) {
  run([this, a = kernel_view(a), b = kernel_view(b), c = kernel_view(c), transpose_a,
       transpose_b, alpha, beta] { ops_.matmul(a, b, c, transpose_a, transpose_b, alpha, beta); });
}

void SimBackend::embedding_forward_kernel(const Tensor& ids, const Tensor& table,
                                          const Tensor& out) {
  run([this, ids = kernel_view(ids), table = kernel_view(table), out = kernel_view(out)] {
    ops_.embedding_forward(ids, table, out);
  });
}

void SimBackend::embedding_backward_kernel(const Tensor& ids, const Tensor& dout,
                                           const Tensor& dtable) {
  run([this, ids = kernel_view(ids), dout = kernel_view(dout),
                dtable = kernel_view(dtable)] { ops_.embedding_backward(ids, dout, dtable); });
}

void SimBackend::embedding_shard_forward_kernel(const Tensor& ids, const Tensor& table,
                                                const Tensor& out, int64_t begin) {
  run([this, ids = kernel_view(ids), table = kernel_view(table), out = kernel_view(out),
                begin] { ops_.embedding_shard_forward(ids, table, out, begin); });
}

void SimBackend::embedding_shard_backward_kernel(const Tensor& ids, const Tensor& dout,
                                                 const Tensor& dtable, int64_t begin) {
  run([this, ids = kernel_view(ids), dout = kernel_view(dout),
                dtable = kernel_view(dtable),
                begin] { ops_.embedding_shard_backward(ids, dout, dtable, begin); });
}

void SimBackend::rmsnorm_forward_kernel(const Tensor& x, const Tensor& weight, const Tensor& out,
                                        const Tensor& rstd, float eps) {
  run([this, x = kernel_view(x), weight = kernel_view(weight), out = kernel_view(out),
       rstd = kernel_view(rstd), eps] { ops_.rmsnorm_forward(x, weight, out, rstd, eps); });
}

void SimBackend::add_rmsnorm_forward_kernel(const Tensor& a, const Tensor& b, const Tensor& sum,
                                            const Tensor& weight, const Tensor& out,
                                            const Tensor& rstd, float eps) {
  run([this, a = kernel_view(a), b = kernel_view(b), sum = kernel_view(sum),
       weight = kernel_view(weight), out = kernel_view(out), rstd = kernel_view(rstd), eps] {
    ops_.add_rmsnorm_forward(a, b, sum, weight, out, rstd, eps);
  });
}

void SimBackend::rmsnorm_backward_kernel(const Tensor& dout, const Tensor& x,
                                         const Tensor& weight, const Tensor& rstd,
                                         const Tensor& dx, const Tensor& dweight,
                                         const Tensor* dx_copy) {
  const Tensor copy = dx_copy ? kernel_view(*dx_copy) : Tensor();
  run([this, dout = kernel_view(dout), x = kernel_view(x), weight = kernel_view(weight),
       rstd = kernel_view(rstd), dx = kernel_view(dx), dweight = kernel_view(dweight), copy,
       has_copy = dx_copy != nullptr] {
    ops_.rmsnorm_backward(dout, x, weight, rstd, dx, dweight, has_copy ? &copy : nullptr);
  });
}

void SimBackend::rope_forward_kernel(const Tensor& x, const Tensor& out, const Tensor& positions,
                                     const RopeParams& params) {
  run([this, x = kernel_view(x), out = kernel_view(out), positions = kernel_view(positions),
       params] { ops_.rope_forward(x, out, positions, params); });
}

void SimBackend::rope_backward_kernel(const Tensor& dout, const Tensor& dx,
                                      const Tensor& positions, const RopeParams& params) {
  run([this, dout = kernel_view(dout), dx = kernel_view(dx), positions = kernel_view(positions),
       params] { ops_.rope_backward(dout, dx, positions, params); });
}

void SimBackend::attention_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& out, const Tensor& lse,
                                          const AttentionParams& params) {
  // The document ids travel by value; the task points its own params at them.
  const Tensor doc_ids = params.doc_ids ? kernel_view(*params.doc_ids) : Tensor();
  ++queued_attention_forward_;
  run([this, q = kernel_view(q), k = kernel_view(k), v = kernel_view(v), out = kernel_view(out),
       lse = kernel_view(lse), params, doc_ids] {
    AttentionParams local = params;
    if (params.doc_ids) local.doc_ids = &doc_ids;
    ops_.attention_forward(q, k, v, out, lse, local);
  });
}

void SimBackend::attention_backward_kernel(const Tensor& dout, const Tensor& q, const Tensor& k,
                                           const Tensor& v, const Tensor& out, const Tensor& lse,
                                           const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                           const AttentionParams& params) {
  const Tensor doc_ids = params.doc_ids ? kernel_view(*params.doc_ids) : Tensor();
  ++queued_attention_backward_;
  run([this, dout = kernel_view(dout), q = kernel_view(q), k = kernel_view(k),
       v = kernel_view(v), out = kernel_view(out), lse = kernel_view(lse), dq = kernel_view(dq),
       dk = kernel_view(dk), dv = kernel_view(dv), params, doc_ids] {
    AttentionParams local = params;
    if (params.doc_ids) local.doc_ids = &doc_ids;
    ops_.attention_backward(dout, q, k, v, out, lse, dq, dk, dv, local);
  });
}

void SimBackend::attention_merge_kernel(const Tensor& out, const Tensor& lse,
                                        const Tensor& part_out, const Tensor& part_lse) {
  run([this, out = kernel_view(out), lse = kernel_view(lse), part_out = kernel_view(part_out),
       part_lse = kernel_view(part_lse)] { ops_.attention_merge(out, lse, part_out, part_lse); });
}

void SimBackend::swiglu_forward_kernel(const Tensor& gate, const Tensor& up, const Tensor& out) {
  run([this, gate = kernel_view(gate), up = kernel_view(up), out = kernel_view(out)] {
    ops_.swiglu_forward(gate, up, out);
  });
}

void SimBackend::swiglu_backward_kernel(const Tensor& dout, const Tensor& gate, const Tensor& up,
                                        const Tensor& dgate, const Tensor& dup) {
  run([this, dout = kernel_view(dout), gate = kernel_view(gate), up = kernel_view(up),
       dgate = kernel_view(dgate),
       dup = kernel_view(dup)] { ops_.swiglu_backward(dout, gate, up, dgate, dup); });
}

void SimBackend::add_kernel(const Tensor& a, const Tensor& b, const Tensor& out) {
  run([this, a = kernel_view(a), b = kernel_view(b), out = kernel_view(out)] {
    ops_.add(a, b, out);
  });
}

void SimBackend::scale_kernel(const Tensor& x, float alpha) {
  run([this, x = kernel_view(x), alpha] { ops_.scale(x, alpha); });
}

void SimBackend::axpy_kernel(float alpha, const Tensor& x, const Tensor& y) {
  run([this, alpha, x = kernel_view(x), y = kernel_view(y)] { ops_.axpy(alpha, x, y); });
}

void SimBackend::cast_kernel(const Tensor& src, const Tensor& dst) {
  run([this, src = kernel_view(src), dst = kernel_view(dst)] { ops_.cast(src, dst); });
}

void SimBackend::dropout_kernel(const Tensor& x, const Tensor& out, float p, uint64_t seed) {
  run([this, x = kernel_view(x), out = kernel_view(out), p, seed] {
    ops_.dropout(x, out, p, seed);
  });
}

void SimBackend::cross_entropy_kernel(const Tensor& logits, const Tensor& targets,
                                      const Tensor* loss_mask, int ignore_index,
                                      const Tensor& losses, const Tensor* dlogits,
                                      float grad_scale) {
  const Tensor mask = loss_mask ? kernel_view(*loss_mask) : Tensor();
  const Tensor grad = dlogits ? kernel_view(*dlogits) : Tensor();
  run([this, logits = kernel_view(logits), targets = kernel_view(targets), mask, grad,
                has_mask = loss_mask != nullptr, has_grad = dlogits != nullptr, ignore_index,
                losses = kernel_view(losses), grad_scale] {
    ops_.cross_entropy(logits, targets, has_mask ? &mask : nullptr, ignore_index, losses,
                       has_grad ? &grad : nullptr, grad_scale);
  });
}

void SimBackend::cross_entropy_shard_stats_kernel(const Tensor& logits, const Tensor& targets,
                                                  int ignore_index, int64_t begin,
                                                  const Tensor& stats) {
  run([this, logits = kernel_view(logits), targets = kernel_view(targets), ignore_index,
                begin, stats = kernel_view(stats)] {
    ops_.cross_entropy_shard_stats(logits, targets, ignore_index, begin, stats);
  });
}

void SimBackend::cross_entropy_shard_backward_kernel(const Tensor& logits, const Tensor& targets,
                                                     const Tensor* loss_mask, int ignore_index,
                                                     int64_t begin, const Tensor& lse,
                                                     const Tensor& dlogits, float grad_scale) {
  const Tensor mask = loss_mask ? kernel_view(*loss_mask) : Tensor();
  run([this, logits = kernel_view(logits), targets = kernel_view(targets), mask,
                has_mask = loss_mask != nullptr, ignore_index, begin, lse = kernel_view(lse),
                dlogits = kernel_view(dlogits), grad_scale] {
    ops_.cross_entropy_shard_backward(logits, targets, has_mask ? &mask : nullptr, ignore_index,
                                      begin, lse, dlogits, grad_scale);
  });
}

void SimBackend::adamw_step_kernel(std::span<const AdamWTensors> sets,
                                   const AdamWParams& params) {
  // One task for the whole step, as one multi-tensor launch on a device.
  std::vector<AdamWTensors> views(sets.begin(), sets.end());
  for (AdamWTensors& set : views) {
    set.param = kernel_view(set.param);
    set.grad = kernel_view(set.grad);
    set.m = kernel_view(set.m);
    set.v = kernel_view(set.v);
    if (set.param_copy.defined()) set.param_copy = kernel_view(set.param_copy);
  }
  run([this, views = std::move(views), params] { ops_.adamw_step(views, params); });
}

void SimBackend::sum_to_double_kernel(const Tensor& x, const Tensor& result) {
  run([this, x = kernel_view(x), result = kernel_view(result)] { ops_.sum_to_double(x, result); });
}

double SimBackend::sum_squares_kernel(const Tensor& x) {
  double result = 0.0;
  run_and_wait([this, x = kernel_view(x), &result] { result = ops_.sum_squares(x); });
  return result;
}

bool SimBackend::all_finite_kernel(const Tensor& x) {
  bool result = true;
  run_and_wait([this, x = kernel_view(x), &result] { result = ops_.all_finite(x); });
  return result;
}

void SimBackend::accumulate_exact_squares_kernel(const Tensor& x, const Tensor& counters) {
  // On the kernel view, as every kernel: the counters stay in device memory (no host copy).
  run([x = kernel_view(x), counters = kernel_view(counters)] {
    add_squares_to_digit_counters(x.f32(), x.numel(), exact_counters(counters));
  });
}

void register_sim_backend(BackendRegistry& registry) {
  registry.add({"sim",
                [] {
                  // `anvil info` describes every backend: a bad ANVIL_SIM_MEMORY is shown
                  // here, and stops only a run that asks for sim.
                  std::string memory;
                  try {
                    memory = fmt::format("{} bytes of memory", configured_capacity());
                  } catch (const Error& e) {
                    memory = e.what();
                  }
                  return fmt::format(
                      "sim: simulated device, {} (ANVIL_SIM_MEMORY, default {}), "
                      "host access to device memory faults, ops run on an asynchronous stream, "
                      "kernels of the optimized cpu backend",
                      memory, kDefaultMemory);
                },
                [] { return std::unique_ptr<Backend>(new SimBackend(configured_capacity())); },
                true,
                [](const Backend& backend) {
                  const sim::SimArena& arena = static_cast<const SimBackend&>(backend).arena();
                  return static_cast<int64_t>(arena.capacity() - arena.bytes_in_use());
                }});
}

}  // namespace anvil
