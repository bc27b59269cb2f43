// `anvil plan --config X --nproc N [--hardware NAME] [--json] [--fit]`: predicts, without
// building the model, what a training configuration needs on each device (bytes by memory
// category, from the engine's own shard plans and arena carve) and how long its step takes
// on the named hardware, broken down by op kind (GEMMs, attention, memory-bound kernels,
// optimizer, communication); --fit ranks every mesh of N devices at its largest micro-batch.
// Configuration keys are taken exactly as `anvil train` takes them (--section.key=value).
#include <fmt/format.h>

#include <filesystem>
#include <optional>

#include "cli/command.h"
#include "core/error.h"
#include "model/hf_config.h"
#include "train/config.h"
#include "train/model_setup.h"
#include "plan/plan.h"

namespace anvil::cli {
namespace {

std::string hardware_help() {
  std::string text = "\nHardware profiles (--hardware):\n";
  text += "  cpu            this machine: the cpu backend's GEMM rate (or --cpu-gflops), "
          "attention rate,\n                 kernel memory bandwidth (or --memory-gbps) and "
          "per-op cost measured at start,\n                 MemTotal and half the memcpy "
          "bandwidth (or --link-gbps), shared by the ranks\n";
  for (const HardwareProfile& p : accelerator_profiles()) {
    text += fmt::format("  {:<14} {}: {:.0f} GiB, {:.0f} GB/s; peak {:.1f} TFLOP/s bf16, {:.1f} "
                        "f32;\n                 reached: GEMMs {:.0f} bf16, attention {:.0f}, "
                        "memory {:.0f} GB/s; links {:.0f} GB/s, host {:.0f} GB/s\n",
                        p.name, p.description, static_cast<double>(p.memory_bytes) / (1 << 30),
                        p.memory_peak_gbps, p.bf16_tflops, p.f32_tflops, p.gemm_bf16_tflops,
                        p.attention_bf16_tflops, p.memory_gbps, p.link_gbps, p.host_link_gbps);
  }
  text +=
      "\nWhat is predicted (docs/plan.md has the whole model and its checks against runs):\n"
      "  memory   per device, by category (frozen_weights, trainable_weights, gradients,\n"
      "           optimizer_state, activations, communication, workspace), computed by the\n"
      "           engine's own planning functions from the shard plan, the gather/gradient\n"
      "           slots and the activation arena a run would allocate; with\n"
      "           --parallel.offload=true the AdamW moments move to host memory, beside an f32\n"
      "           master and a gradient copy of the rank's shard (what the engine's offload\n"
      "           holds; the device keeps the weights and gradients it computes with).\n"
      "  time     step = max(compute, overlapped communication) + serial communication;\n"
      "           compute = the sum over every op of the step (each projection's GEMMs forward\n"
      "           and backward, attention over the visible pairs, norms, RoPE, SwiGLU, adds,\n"
      "           casts, the embedding, the head's chunks and classifier, AdamW, the gradient\n"
      "           norm, recomputation, LoRA's adapters) of max(FLOPs / the GEMM or attention\n"
      "           rate, bytes / the memory bandwidth) plus a launch cost per kernel; each\n"
      "           collective's ring bytes over the profile's link (network between nodes) x\n"
      "           --comm-efficiency. The report breaks the step down by op kind.\n";
  return text;
}

TrainConfig resolve_config(const std::string& config_path, const std::string& model_dir,
                           const std::vector<ConfigOverride>& overrides) {
  TrainConfig config;
  if (!config_path.empty()) {
    ANVIL_CHECK(std::filesystem::exists(config_path),
                "[plan] --config {}: no such file (presets live in configs/, e.g. "
                "configs/llama3-8b.toml)",
                config_path);
    apply_config_file(config, config_path);
  }
  if (!model_dir.empty()) {
    const std::string init_from = config.model.init_from;
    config.model = model_section_from(llama_config_from_hf_json(model_dir));
    config.model.init_from = init_from;
  }
  for (const ConfigOverride& o : overrides) apply_config_override(config, o.name, o.value);
  return config;
}

int run_plan(const std::vector<std::string>& raw_args) {
  std::vector<std::string> args = raw_args;
  const std::vector<ConfigOverride> overrides = extract_config_overrides(args);
  CLI::App app(
      "Predict per-device memory by category and step time of a training configuration on N "
      "devices of a hardware profile, without building the model.",
      "anvil plan");
  std::string config_path;
  std::string model_dir;
  PlanSettings settings;
  std::string hardware = "cpu";
  bool json = false;
  bool fit = false;
  std::optional<double> cpu_gflops;
  std::optional<double> link_gbps;
  std::optional<double> memory_gbps;
  std::optional<double> attention_tflops;
  app.add_option("--config", config_path, "TOML config, as for anvil train (default: the tiny "
                                          "preset); configs/ has bench-1.5b, llama2-7b, "
                                          "llama3-8b, llama3.1-405b");
  app.add_option("--model", model_dir,
                 "take the [model] section from a Hugging Face model folder's config.json");
  app.add_option("--nproc", settings.nproc, "devices (ranks) of the job")->capture_default_str();
  app.add_option("--hardware", hardware, "hardware profile (listed below)")->capture_default_str();
  app.add_flag("--json", json, "print one JSON object instead of text");
  app.add_flag("--fit", fit,
               "for every mesh dp x fsdp x tp x cp of --nproc devices, find the largest "
               "micro-batch that fits and rank the meshes by predicted tokens/s");
  app.add_option("--efficiency", settings.efficiency,
                 "share of the dense peak FLOP/s that GEMMs reach (default: the profile's, 0.75 "
                 "on H100 and H200, 0.6 on the other accelerators, 1 of the measured GEMM rate "
                 "on cpu)");
  app.add_option("--attention-tflops", attention_tflops,
                 "TFLOP/s fused attention reaches per device (default: the profile's)");
  app.add_option("--memory-gbps", memory_gbps,
                 "GB/s (read + written) memory-bound kernels reach per device (default: the "
                 "profile's; on cpu all ranks together, instead of measuring it)");
  app.add_option("--comm-efficiency", settings.comm_efficiency,
                 "share of the link bandwidth collectives reach")
      ->capture_default_str();
  app.add_option("--reserve", settings.reserve,
                 "share of device memory kept free for the runtime and fragmentation")
      ->capture_default_str();
  app.add_option("--cpu-gflops", cpu_gflops,
                 "cpu profile: this machine's GEMM GFLOP/s (all ranks together) instead of "
                 "measuring it");
  app.add_option("--link-gbps", link_gbps,
                 "cpu profile: GB/s between ranks instead of half the measured copy bandwidth");
  ThreadOption threads;
  threads.add_to(app);
  app.footer(hardware_help() +
             "\nAny configuration key may be set as --section.key=value (see anvil train "
             "--help).");
  if (!parse_args(app, args)) return 0;
  threads.configure();
  ANVIL_CHECK(settings.efficiency >= 0 && settings.efficiency <= 1,
              "[plan] --efficiency must be in (0, 1], got {}", settings.efficiency);
  ANVIL_CHECK(settings.comm_efficiency > 0 && settings.comm_efficiency <= 1,
              "[plan] --comm-efficiency must be in (0, 1], got {}", settings.comm_efficiency);
  ANVIL_CHECK(settings.nproc >= 1, "[plan] --nproc must be >= 1, got {}", settings.nproc);
  ANVIL_CHECK(!attention_tflops || *attention_tflops > 0,
              "[plan] --attention-tflops must be > 0, got {}", attention_tflops.value_or(0));
  ANVIL_CHECK(!memory_gbps || *memory_gbps > 0, "[plan] --memory-gbps must be > 0, got {}",
              memory_gbps.value_or(0));

  const TrainConfig config = resolve_config(config_path, model_dir, overrides);
  validate_config(config);
  CpuProfileOptions cpu;
  cpu.ranks = settings.nproc;
  cpu.dtype = config.training.dtype;
  cpu.gflops = cpu_gflops;
  cpu.link_gbps = link_gbps;
  cpu.memory_gbps = memory_gbps;
  settings.hardware = find_hardware_profile(hardware, cpu);
  if (attention_tflops) {
    settings.hardware.attention_bf16_tflops = *attention_tflops;
    settings.hardware.attention_f32_tflops = *attention_tflops;
  }
  if (memory_gbps && hardware != "cpu") settings.hardware.memory_gbps = *memory_gbps;

  if (fit) {
    const std::vector<Plan> plans = fit_meshes(config, settings);
    fmt::print("{}\n", json ? fit_json(plans, settings) : fit_text(plans, settings));
    return 0;
  }
  const Plan plan = make_plan(config, settings);
  const std::vector<std::string> suggestions =
      plan.fits ? std::vector<std::string>() : what_would_fit(config, settings);
  fmt::print("{}\n", json ? plan_json(plan, settings, suggestions)
                          : plan_text(plan, settings, suggestions));
  return 0;
}

}  // namespace

ANVIL_COMMAND("plan", "predict per-device memory and step time of a configuration on N devices",
              17, run_plan);

}  // namespace anvil::cli
