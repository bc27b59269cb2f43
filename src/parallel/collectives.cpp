// Exact host collectives (see collectives.h): values travel as pairs of u32 words.
#include "parallel/collectives.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace anvil {

std::vector<uint64_t> all_gather_words(Communicator& comm, std::span<const uint64_t> values) {
  std::vector<uint64_t> in(values.begin(), values.end());
  // A world of one gathers its own values: no collective, so no host value ever touches a
  // device communicator's staging (which would block the host on the device).
  if (comm.size() == 1) return in;
  std::vector<uint64_t> out(in.size() * static_cast<size_t>(comm.size()));
  const auto n = static_cast<int64_t>(in.size()) * 2;
  comm.all_gather(Tensor(in.data(), DType::u32, Shape{n}),
                  Tensor(out.data(), DType::u32, Shape{n * comm.size()}));
  return out;
}

std::vector<int64_t> all_gather_int64s(Communicator& comm, std::span<const int64_t> values) {
  std::vector<uint64_t> words(values.size());
  for (size_t i = 0; i < values.size(); ++i) words[i] = static_cast<uint64_t>(values[i]);
  std::vector<int64_t> out;
  for (const uint64_t word : all_gather_words(comm, words)) {
    out.push_back(static_cast<int64_t>(word));
  }
  return out;
}

std::vector<MemorySnapshot> all_gather_memory(Communicator& comm, const MemorySnapshot& mine) {
  std::vector<int64_t> values(mine.current.begin(), mine.current.end());
  values.insert(values.end(), mine.peak.begin(), mine.peak.end());
  values.push_back(mine.total);
  values.push_back(mine.total_peak);
  const std::vector<int64_t> all = all_gather_int64s(comm, values);
  std::vector<MemorySnapshot> ranks(all.size() / values.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int64_t* v = all.data() + r * values.size();
    MemorySnapshot& s = ranks[r];
    std::copy_n(v, s.current.size(), s.current.begin());
    std::copy_n(v + s.current.size(), s.peak.size(), s.peak.begin());
    s.total = v[values.size() - 2];
    s.total_peak = v[values.size() - 1];
  }
  return ranks;
}

std::vector<double> all_gather_doubles(Communicator& comm, std::span<const double> values) {
  std::vector<uint64_t> words(values.size());
  for (size_t i = 0; i < values.size(); ++i) words[i] = std::bit_cast<uint64_t>(values[i]);
  std::vector<double> out;
  for (const uint64_t word : all_gather_words(comm, words)) {
    out.push_back(std::bit_cast<double>(word));
  }
  return out;
}

int64_t all_ranks_sum(Communicator& comm, int64_t value) {
  int64_t total = 0;
  for (const int64_t v : all_gather_int64s(comm, std::span<const int64_t>(&value, 1))) total += v;
  return total;
}

void broadcast_string(Communicator& comm, std::string& text, int root) {
  if (comm.size() == 1) return;
  uint32_t length = static_cast<uint32_t>(text.size());
  comm.broadcast(Tensor(&length, DType::u32, Shape{1}), root);
  std::vector<uint32_t> words((length + 3) / 4, 0);
  // An empty string has no words: memcpy must not see words.data() == nullptr.
  if (comm.rank() == root && !text.empty()) std::memcpy(words.data(), text.data(), text.size());
  comm.broadcast(Tensor(words.data(), DType::u32, Shape{static_cast<int64_t>(words.size())}), root);
  text.assign(reinterpret_cast<const char*>(words.data()), length);
}

}  // namespace anvil
