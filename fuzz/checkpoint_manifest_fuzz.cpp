// libFuzzer target for checkpoint manifests (manifest.json): the input becomes the manifest of
// a checkpoint folder holding one small file, with a COMMIT marker carrying the manifest's own
// hash, so the fuzzer gets past the checksum into the manifest's fields. Loading must either
// verify the folder or throw anvil::Error naming the problem.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "fuzz_glue.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path dir = anvil::fuzz::scratch_dir() / "step-0000010";
  // The seeds' manifests list this file with its size and hash.
  anvil::fuzz::write_file_bytes(dir / "state.json", "anvil\n");
  anvil::fuzz::write_file_bytes(dir / "manifest.json", anvil::fuzz::as_text(data, size));
  anvil::fuzz::write_file_bytes(
      dir / "COMMIT", fmt::format("manifest_xxhash64={:016x}\n", XXH64(data, size, 0)));
  anvil::fuzz::expect_error_or_success([&] { anvil::CheckpointManager::load(dir); });
  return 0;
}
