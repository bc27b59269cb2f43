// libFuzzer target for token shards (`*.tok`, docs/formats.md): the reader validates header,
// length, checksums and document offsets before anything is read. A mutated file almost never
// keeps its checksums, which would stop the fuzzer at the first check, so the target writes
// the input as is and, when it has a whole header, a second time with both checksums (header
// and payload, offsets 120 and 48) recomputed. Every token, offset and loss-mask byte of a
// shard that opens is read, which must stay inside the mapped file.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/shard_reader.h"
#include "fuzz_glue.h"

namespace {

void read_everything(const std::string& path, bool verify_payload) {
  const anvil::ShardReader reader(path, verify_payload);
  const uint64_t count = reader.token_count();
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  reader.read_tokens(0, count, tokens.data());
  uint64_t sum = 0;
  for (const uint64_t offset : reader.doc_offsets()) sum += offset;
  for (const uint8_t mask : reader.loss_mask()) sum += mask;
  if (sum == 1) tokens.clear();  // keeps the reads from being optimised away
}

// Stores a little-endian u64 (the shard format's byte order) at `at`.
void put_u64(uint8_t* at, uint64_t value) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<uint8_t>(value >> (8 * i));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::write_scratch("train-00000.tok", data, size).string();
  anvil::fuzz::expect_error_or_success([&] { read_everything(path, true); });
  anvil::fuzz::expect_error_or_success([&] { read_everything(path, false); });
  constexpr size_t kHeaderBytes = 128;
  if (size < kHeaderBytes) return 0;
  std::vector<uint8_t> fixed(data, data + size);
  put_u64(fixed.data() + 48, XXH64(fixed.data() + kHeaderBytes, size - kHeaderBytes, 0));
  put_u64(fixed.data() + 120, XXH64(fixed.data(), 120, 0));
  anvil::fuzz::write_scratch("train-00000.tok", fixed.data(), fixed.size());
  anvil::fuzz::expect_error_or_success([&] { read_everything(path, true); });
  return 0;
}
