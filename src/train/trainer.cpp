// The training loop (see trainer.h). A step: fill this rank's micro-batches of the global
// batch on the host (micro-step m of data rank r reads BatchLayout's samples), and let the
// parallel engine count the global batch's trained tokens N, run every micro-batch's
// forward/backward with gradient scale 1/N, reduce the gradients in the global micro-batch
// order, clip by the global norm and apply AdamW at the scheduled rate. One process is the
// engine at world size 1. Nothing in a step depends on wall time, the world size or anything
// outside the checkpointed state, so a resumed run repeats the uninterrupted one bit for bit.
// World rank 0 alone prints, writes metrics and the run's files (a profile window's trace,
// profiler.h, has one file per rank). Building and resuming the run: trainer_setup.cpp.
// Failure policy: a step with a non-finite loss or gradient norm is never applied (the engine
// checks before the update); it stops the run with a DivergenceError, or with
// training.skip_nonfinite is skipped (step, learning-rate schedule and data cursor advance,
// AdamW does not) until max_skipped_steps in a row. A checkpoint that cannot be written stops
// the run, or with checkpoint.on_error = "continue" is retried at the next checkpoint step.
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/divergence_error.h"
#include "core/error.h"
#include "core/log.h"
#include "core/threading.h"
#include "core/trace.h"
#include "io/file_util.h"
#include "observe/tensorboard_sink.h"
#include "parallel/collectives.h"
#include "train/model_setup.h"
#include "train/signals.h"
#include "train/trainer_state.h"

namespace anvil {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double>(end - begin).count();
}

// Returns the largest value of every field of the ranks' snapshots (collective over `world`).
MemorySnapshot max_over_ranks(Communicator& world, const MemorySnapshot& mine) {
  MemorySnapshot max = mine;
  for (const MemorySnapshot& rank : all_gather_memory(world, mine)) {
    for (size_t c = 0; c < max.current.size(); ++c) {
      max.current[c] = std::max(max.current[c], rank.current[c]);
      max.peak[c] = std::max(max.peak[c], rank.peak[c]);
    }
    max.total = std::max(max.total, rank.total);
    max.total_peak = std::max(max.total_peak, rank.total_peak);
  }
  return max;
}

// Steps of each process run left out of the steady-state throughput (start-up effects).
constexpr int64_t kThroughputWarmupSteps = 2;

}  // namespace

void Trainer::message(const std::string& line) {
  if (root_) printer_.message(line);
}

StepOutcome Trainer::train_step(int64_t step) {
  const Clock::time_point begin = Clock::now();
  const HostWaits waits_before = backend_->host_waits();
  watch(step, nullptr);
  BatchLayout layout;
  layout.micro_batch = micro_batch_;
  layout.grad_accum = grad_accum_;
  layout.world_size = mesh_->sample_world();
  // Samples are numbered from the cursor: BatchLayout's step 0 is this step's global batch.
  std::vector<HostBatch::Views> views(static_cast<size_t>(grad_accum_));
  std::vector<Batch> micro_batches;
  TraceSpan data_span("data", "data");
  data_span.arg("samples", int64_t{micro_batch_} * grad_accum_);
  for (int m = 0; m < grad_accum_; ++m) {
    const int64_t row = int64_t{m} * micro_batch_;
    const int64_t first = layout.first_sample(0, m, mesh_->sample_rank());
    train_batch_.fill(*data_.train, row, progress_.cursor.next_sample + first, micro_batch_);
    micro_batches.push_back(
        train_batch_.micro_batch(row, micro_batch_, views[static_cast<size_t>(m)]));
  }
  data_span.end();
  if (mesh_->data_rank() == 0 && test_asks_nan_at_step(step)) train_batch_.poison_loss_mask();
  StepOutcome outcome;
  outcome.lr = schedule_.lr_at(step);
  model_->set_dropout_step(step);  // adapter dropout masks are a function of the step
  outcome.loss_scale = loss_scaler_ ? loss_scaler_->scale() : 0.0;
  const StepReport report =
      engine_->train_step(micro_batches, outcome.lr, loss_scaler_ ? loss_scaler_->scale() : 1.0);
  outcome.loss = report.loss.mean();
  outcome.grad_norm = report.grad_norm;
  outcome.skipped = !report.applied;
  // A finite loss whose scaled gradients overflowed is loss scaling at work: skip the step
  // and halve the scale. At the minimum scale the overflow is the model's, handled as any
  // non-finite step.
  const bool overflow = outcome.skipped && loss_scaler_ && std::isfinite(report.loss.sum);
  if (overflow && loss_scaler_->update(false)) {
    ++progress_.skipped_steps;
    if (root_) {
      log_info("[train] step {}: gradients overflowed at loss scale {}; step skipped, scale "
               "now {}",
               step, outcome.loss_scale, loss_scaler_->scale());
    }
  } else if (outcome.skipped) {
    handle_nonfinite_step(step, outcome);
  } else {
    progress_.consecutive_skipped = 0;
    if (loss_scaler_) loss_scaler_->update(true);
  }
  if (loss_scaler_) progress_.loss_scale = loss_scaler_->state();
  // No wait for the device here: the optimizer update stays queued while the host goes on to
  // the next step's data (the host runs ahead; a step's time includes the wait for the last).
  outcome.waits = backend_->host_waits() - waits_before;

  progress_.step = step;
  progress_.cursor.next_sample += layout.global_batch();
  progress_.tokens_seen += layout.global_batch() * seq_len_;
  outcome.seconds = seconds_between(begin, Clock::now());
  progress_.train_seconds += outcome.seconds;
  return outcome;
}

EvalRecord Trainer::evaluate(int64_t step) {
  TraceSpan span("evaluate", "eval");
  EvalRecord record;
  record.step = step;
  record.has_loss = data_.val != nullptr || !data_.val_sources.empty();
  if (!benchmarks_.empty()) {
    record.task_scores = benchmarks_.score(*engine_, eval_batch_size_);
    std::string line;
    for (const auto& [name, value] : record.task_scores) {
      line += fmt::format("{}{} {:.4f}", line.empty() ? "" : " | ", name, value);
    }
    message(fmt::format("eval step {}: {}", step, line));
  }
  if (!data_.val && data_.val_sources.empty()) {
    record.elapsed_s = seconds_between(run_start_, Clock::now());
    return record;
  }
  if (data_.val) {
    const LossSum total = score_validation(*data_.val, data_.val_samples);
    record.loss = total.mean();
    record.tokens = total.count;
  } else {
    // A mixture's validation loss weighs each source's mean loss by its mixture weight.
    for (ValidationSource& source : data_.val_sources) {
      const LossSum total = score_validation(*source.source, source.samples);
      record.source_val_loss.emplace_back(source.name, total.mean());
      record.loss += source.weight * total.mean();
      record.tokens += total.count;
    }
  }
  record.perplexity = std::exp(record.loss);
  record.elapsed_s = seconds_between(run_start_, Clock::now());
  std::string per_source;
  for (const auto& [name, loss] : record.source_val_loss) {
    per_source += fmt::format(" | {} {:.4f}", name, loss);
  }
  message(fmt::format("eval step {}: val loss {:.4f} | ppl {:.2f} | {} tokens{}", step,
                      record.loss, record.perplexity, record.tokens, per_source));
  return record;
}

LossSum Trainer::score_validation(SampleSource& source, int64_t samples) {
  // Batch i runs on data rank i % world; the engine adds the sums in batch order.
  const int64_t batches = (samples + eval_batch_size_ - 1) / eval_batch_size_;
  HostBatch::Views views;
  return engine_->evaluate(batches, [&](int64_t i) {
    const int64_t first = i * eval_batch_size_;
    const int count = static_cast<int>(std::min<int64_t>(eval_batch_size_, samples - first));
    TraceSpan data_span("data", "data");
    data_span.arg("samples", count);
    eval_batch_.fill(source, 0, first, count);
    return eval_batch_.micro_batch(0, count, views);
  });
}

void Trainer::record_sources(TrainStepRecord& record, int64_t samples_before) {
  MixtureSource* mixture = data_.mixture;
  if (mixture == nullptr) return;
  const int64_t samples_after = progress_.cursor.next_sample;
  const std::vector<int64_t> drawn = mixture->drawn_before(samples_after);
  const std::vector<int64_t> epochs_after = mixture->epochs_completed(samples_after);
  const std::vector<int64_t> epochs_before = mixture->epochs_completed(samples_before);
  for (int k = 0; k < mixture->size(); ++k) {
    const MixtureComponent& source = mixture->component(k);
    record.source_tokens.emplace_back(source.name, drawn[static_cast<size_t>(k)] * seq_len_);
    const int64_t epochs = epochs_after[static_cast<size_t>(k)];
    if (epochs > epochs_before[static_cast<size_t>(k)]) {
      message(fmt::format("data source '{}' ran out (epoch {} of its {} windows done); it "
                          "repeats in a new order",
                          source.name, epochs, source.samples_per_epoch));
    }
  }
}

std::string Trainer::resume_hint() const {
  if (last_checkpoint_.empty()) return "the run has no checkpoint yet";
  return "resume from " + last_checkpoint_.string();
}

void Trainer::handle_nonfinite_step(int64_t step, const StepOutcome& outcome) {
  // Every rank sees the same global loss and norm, so every rank throws or skips alike.
  if (!config_.training.skip_nonfinite) {
    throw DivergenceError(
        fmt::format("[train] training diverged at step {}: loss {} / gradient norm {} is not "
                    "finite; the step was not applied and no checkpoint holds it. Lower "
                    "optimizer.lr or set optimizer.grad_clip (or set training.skip_nonfinite = "
                    "true to skip such steps), then {}",
                    step, outcome.loss, outcome.grad_norm, resume_hint()),
        __FILE__, __LINE__);
  }
  ++progress_.skipped_steps;
  ++progress_.consecutive_skipped;
  if (progress_.consecutive_skipped >= config_.training.max_skipped_steps) {
    throw DivergenceError(
        fmt::format("[train] training diverged: steps {}-{} all had a non-finite loss or "
                    "gradient norm ({} in a row, training.max_skipped_steps = {}) and were "
                    "skipped; the run is not recovering. Lower optimizer.lr or set "
                    "optimizer.grad_clip, then {}",
                    step - progress_.consecutive_skipped + 1, step,
                    progress_.consecutive_skipped, config_.training.max_skipped_steps,
                    resume_hint()),
        __FILE__, __LINE__);
  }
  if (root_) {
    log_warn("[train] step {}: loss {} / gradient norm {} is not finite; step skipped (no "
             "update; {} skipped so far, {} in a row; {} in a row stop the run)",
             step, outcome.loss, outcome.grad_norm, progress_.skipped_steps,
             progress_.consecutive_skipped, config_.training.max_skipped_steps);
  }
}

void Trainer::save_checkpoint(bool stopping) {
  const Clock::time_point begin = Clock::now();
  try {
    last_checkpoint_ = store_.save(*engine_, progress_, config_);
  } catch (const CheckpointSaveError& e) {
    if (config_.checkpoint.on_error != "continue" || stopping) throw;
    ++checkpoint_failures_;
    if (root_) {
      log_warn("{}; training continues (checkpoint.on_error = \"continue\") and tries again "
               "at the next checkpoint step", e.what());
    }
    return;
  }
  last_saved_step_ = progress_.step;
  message(fmt::format("checkpoint {} ({:.1f} s)", last_checkpoint_.string(),
                      seconds_between(begin, Clock::now())));
}

TrainResult Trainer::run() {
  if (options_.dry_run) {
    // Everything is built and allocated (model, engine, optimizer, data); no weight is read.
    if (root_) create_run_dir(run_.root);
    world_.barrier();
    message(fmt::format("model {} ({:.2f}M parameters)", llama_.summary(),
                        static_cast<double>(llama_.param_count()) / 1e6));
    report_sharding();
    message(fmt::format("dry run: nothing trained; the report is in {}",
                        (run_.root / kShardingReportFile).string()));
    TrainResult result;
    result.run_dir = run_.root;
    return result;
  }
  start_or_resume();
  std::optional<MetricsSinks> metrics;
  if (root_) {
    metrics.emplace();
    metrics->add(std::make_unique<MetricsWriter>(run_.metrics_path(), last_saved_step_));
    if (config_.logging.tensorboard) {
      metrics->add(std::make_unique<TensorBoardSink>(run_.root, last_saved_step_));
    }
    if (world_change_) metrics->write(*world_change_);
  }
  const int64_t total_steps = config_.training.steps;
  const int64_t global_rows = int64_t{micro_batch_} * grad_accum_ * mesh_->sample_world();
  const int64_t tokens_per_step = global_rows * seq_len_;
  TrainResult result;
  result.run_dir = run_.root;
  result.flops_per_token = llama_.flops_per_token(
      seq_len_, attention_schedule_from(config_.attention)
                    .mean_visible_fraction(llama_.n_layers, seq_len_));
  message(fmt::format("run {} | backend {} | {} threads{}", run_.root.string(), backend_->name(),
                      num_threads(), world_.size() > 1 ? " per rank" : ""));
  message(fmt::format("model {} ({:.2f}M parameters)", llama_.summary(),
                      static_cast<double>(llama_.param_count()) / 1e6));
  message(fmt::format("data {}", data_.description));
  if (!benchmarks_.empty()) message("benchmarks at each evaluation: " + benchmarks_.describe());
  message(fmt::format("{} steps x {} sequences x {} tokens = {} tokens per step", total_steps,
                      global_rows, seq_len_, tokens_per_step));
  report_sharding();

  watch(-1, nullptr);
  if (progress_.step == total_steps) {
    message(fmt::format("nothing to do: the run is complete at step {}", total_steps));
  }
  StopSignalGuard signals;
  const int64_t first_step = progress_.step + 1;
  double run_seconds = 0;  // step time of this process
  double steady_seconds = 0;
  int64_t steady_tokens = 0;
  double ema_step_seconds = 0;
  int64_t steady_steps = 0;
  MeshTraffic steady_traffic;
  for (int64_t step = first_step; step <= total_steps; ++step) {
    profiler_.before_step(step, mesh_->traffic(), backend_->memory_snapshot());
    TraceSpan step_span("step", "step");
    step_span.arg("step", step);
    const MeshTraffic before = mesh_->traffic();
    const int64_t samples_before = progress_.cursor.next_sample;
    const StepOutcome outcome = train_step(step);
    const MeshTraffic after = mesh_->traffic();
    const int64_t steps_done = step - first_step + 1;
    run_seconds += outcome.seconds;
    if (steps_done > kThroughputWarmupSteps) {
      steady_seconds += outcome.seconds;
      steady_tokens += tokens_per_step;
      ++steady_steps;
      steady_traffic.tp += after.tp - before.tp;
      steady_traffic.cp += after.cp - before.cp;
      steady_traffic.data += after.data - before.data;
      steady_traffic.dp += after.dp - before.dp;
      steady_traffic.fsdp += after.fsdp - before.fsdp;
    }
    ema_step_seconds =
        steps_done == 1 ? outcome.seconds : 0.9 * ema_step_seconds + 0.1 * outcome.seconds;
    const double step_tokens_per_s = static_cast<double>(tokens_per_step) / outcome.seconds;
    // Every step is logged, so every step gathers the ranks' memory (one small collective).
    const MemorySnapshot memory = max_over_ranks(mesh_->world(), backend_->memory_snapshot());
    if (root_) {
      // Every rank is one device running at most logging.peak_tflops.
      const double mfu = config_.logging.peak_tflops > 0
                             ? step_tokens_per_s * result.flops_per_token /
                                   (config_.logging.peak_tflops * 1e12 * world_.size())
                             : -1.0;
      TrainStepRecord record{step, outcome.loss, outcome.lr, outcome.grad_norm,
                             progress_.tokens_seen, step_tokens_per_s,
                             seconds_between(run_start_, Clock::now()),
                             progress_.skipped_steps, mfu, outcome.loss_scale};
      record.host_waits = outcome.waits.waits;
      record.readback_bytes = outcome.waits.readback_bytes;
      record.mem_bytes = memory.total;
      record.mem_peak_bytes = memory.total_peak;
      record.mem_planned_bytes = planned_peak_bytes_;
      record.mem_peak = memory.peak;
      record_sources(record, samples_before);
      metrics->write(record);
      printer_.step(ProgressStep{step, total_steps, outcome.loss, outcome.lr, outcome.grad_norm,
                                 step_tokens_per_s,
                                 step_tokens_per_s * result.flops_per_token / 1e9,
                                 ema_step_seconds * static_cast<double>(total_steps - step),
                                 peak_rss_mb()});
    }
    kill_self_if_test_asks(step, world_.rank(), world_.size());
    stop_self_if_test_asks(step, world_.rank(), world_.size());
    if (!outcome.skipped) result.final_loss = outcome.loss;
    result.steps_this_run = steps_done;
    result.tokens_this_run += tokens_per_step;
    const bool last = step == total_steps;
    if ((data_.val || !data_.val_sources.empty() || !benchmarks_.empty()) &&
        ((config_.training.eval_every > 0 && step % config_.training.eval_every == 0) || last)) {
      watch(step, "eval");
      const EvalRecord record = evaluate(step);
      if (root_) metrics->write(record);
      if (record.has_loss) result.final_val_loss = record.loss;
      watch(step, nullptr);
    }
    // Ranks receive a stop signal at slightly different times; they agree on the step.
    int32_t stop_signal = StopSignalGuard::signal_number();
    if (mesh_->world().size() > 1)  // a host value: a world of one keeps it off the device
      mesh_->world().all_reduce(Tensor(&stop_signal, DType::i32, Shape{1}), ReduceOp::max);
    const bool stop = stop_signal != 0;
    if ((config_.checkpoint.every > 0 && step % config_.checkpoint.every == 0) || last || stop) {
      watch(step, "checkpoint save");
      save_checkpoint(stop);
      watch(step, nullptr);
    }
    step_span.end();
    profiler_.after_step(step, mesh_->traffic(), backend_->memory_snapshot());
    if (stop) {
      signals.keep_installed();
      result.stopped_by_signal = true;
      message(fmt::format("stopped by signal {} after step {}/{}; resume with: {}", stop_signal,
                          step, total_steps, options_.resume_command));
      break;
    }
  }
  profiler_.finish();
  for (const std::string& line : profiler_.summary_lines()) message(line);
  result.trace = profiler_.summaries();
  result.final_step = progress_.step;
  result.skipped_steps = progress_.skipped_steps;
  result.checkpoint_failures = checkpoint_failures_;
  result.last_checkpoint = last_checkpoint_;
  if (root_ && last_saved_step_ != progress_.step) {
    log_warn("[train] the run ends at step {} without a checkpoint of it ({})", progress_.step,
             last_checkpoint_.empty() ? std::string("it has no checkpoint at all")
                                      : "the newest is " + last_checkpoint_.string());
  }
  // Runs too short for a steady state report their overall rate.
  result.tokens_per_s = steady_seconds > 0 ? static_cast<double>(steady_tokens) / steady_seconds
                        : run_seconds > 0 ? static_cast<double>(result.tokens_this_run) / run_seconds
                                          : 0.0;
  result.gflops_per_s = result.tokens_per_s * result.flops_per_token / 1e9;
  if (steady_steps > 0) {
    result.step_seconds = steady_seconds / static_cast<double>(steady_steps);
    result.traffic_per_step = {
        steady_traffic.tp / steady_steps, steady_traffic.cp / steady_steps,
        steady_traffic.data / steady_steps,
        steady_traffic.dp / steady_steps, steady_traffic.fsdp / steady_steps};
  }
  result.peak_rss_mb = peak_rss_mb();
  result.peak_device_mb =
      static_cast<double>(backend_->memory_snapshot().total_peak) / (1024.0 * 1024.0);
  return result;
}
TrainResult run_training(const TrainRunOptions& options) {
  Trainer trainer(options);
  return trainer.run();
}

std::string train_summary_json(const TrainResult& r) {
  nlohmann::ordered_json summary = {{"steps", r.final_step},
                                    {"steps_this_run", r.steps_this_run},
                                    {"tokens", r.tokens_this_run},
                                    {"tokens_per_s", r.tokens_per_s},
                                    {"flops_per_token", r.flops_per_token},
                                    {"gflops_per_s", r.gflops_per_s},
                                    {"step_seconds", r.step_seconds},
                                    {"comm_bytes_per_step",
                                     {{"tp", r.traffic_per_step.tp},
                                      {"cp", r.traffic_per_step.cp},
                                      {"data", r.traffic_per_step.data},
                                      {"dp", r.traffic_per_step.dp},
                                      {"fsdp", r.traffic_per_step.fsdp}}},
                                    {"peak_rss_mb", r.peak_rss_mb},
                                    {"peak_device_mb", r.peak_device_mb},
                                    {"final_loss", r.final_loss},
                                    {"final_val_loss", nullptr},
                                    {"stopped_by_signal", r.stopped_by_signal},
                                    {"skipped_steps", r.skipped_steps},
                                    {"checkpoint_failures", r.checkpoint_failures},
                                    {"run_dir", r.run_dir.string()}};
  if (r.final_val_loss >= 0) summary["final_val_loss"] = r.final_val_loss;
  if (!r.trace.empty()) {
    summary["trace"] = nlohmann::ordered_json::array();
    for (const TraceRankSummary& rank : r.trace)
      summary["trace"].push_back(trace_summary_json(rank));
  }
  return summary.dump();
}

}  // namespace anvil
