// Checkpoint storage: commit protocol, manifest contents, rotation, uncommitted leftovers,
// corruption detection with fallback, and explicit loading.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "io/file_util.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

// Writes what a two-rank trainer would: a model file, per-rank state and a small JSON.
void write_trainer_files(const fs::path& staging, int64_t step) {
  std::vector<float> weights(64);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(step) + 0.25f * i;
  SafetensorsWriter model;
  model.add("model.norm.weight", Tensor(weights.data(), DType::f32, Shape{64}));
  model.write(staging / "model.safetensors");
  for (int rank = 0; rank < 2; ++rank) {
    fs::create_directories(staging / fmt::format("rank-{:05d}", rank));
    write_file_atomic(staging / fmt::format("rank-{:05d}/optimizer.json", rank),
                      fmt::format("{{\"rank\":{},\"step\":{}}}", rank, step));
  }
  write_file_atomic(staging / "trainer_state.json", fmt::format("{{\"step\":{}}}", step));
}

void save(CheckpointManager& manager, int64_t step) {
  const fs::path staging = manager.prepare(step);
  write_trainer_files(staging, step);
  manager.commit(step, {{"loss", 2.5}, {"tokens_seen", step * 1000}});
}

// Flips one byte in place (same size), as silent disk corruption would.
void flip_byte(const fs::path& path, size_t offset) {
  std::string bytes = testing::read_raw(path);
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x40);
  testing::write_raw(path, bytes);
}

TEST(Checkpoint, CommitWritesManifestAndMarker) {
  TempDir dir;
  CheckpointManager manager(dir / "checkpoints", 3);
  EXPECT_EQ(manager.staging_dir(20), dir / "checkpoints" / "step-0000020.partial");
  EXPECT_FALSE(fs::exists(dir / "checkpoints"));  // staging_dir has no side effects

  const fs::path staging = manager.prepare(20);
  write_trainer_files(staging, 20);
  LoadedCheckpoint committed = manager.commit(20, {{"loss", 2.5}});
  const fs::path final_dir = dir / "checkpoints" / "step-0000020";
  EXPECT_EQ(committed.dir, final_dir);
  EXPECT_FALSE(fs::exists(staging));
  EXPECT_TRUE(fs::exists(final_dir / "COMMIT"));

  const nlohmann::json manifest = nlohmann::json::parse(read_file(final_dir / "manifest.json"));
  EXPECT_EQ(manifest["step"], 20);
  EXPECT_EQ(manifest["anvil_version"], ANVIL_VERSION);
  EXPECT_EQ(manifest["info"]["loss"], 2.5);
  std::vector<std::string> paths;
  for (const auto& file : manifest["files"]) {
    paths.push_back(file["path"]);
    const fs::path on_disk = final_dir / file["path"].get<std::string>();
    EXPECT_EQ(file["size"].get<uint64_t>(), fs::file_size(on_disk));
    EXPECT_EQ(file["xxhash64"], hash_hex(xxhash64_file(on_disk)));
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"model.safetensors", "rank-00000/optimizer.json",
                                             "rank-00001/optimizer.json",
                                             "trainer_state.json"}));

  LoadedCheckpoint loaded = CheckpointManager::load(final_dir);
  EXPECT_EQ(loaded.step, 20);
  EXPECT_EQ(loaded.info["loss"], 2.5);
  EXPECT_EQ(loaded.files.size(), 4u);
  EXPECT_EQ(loaded.anvil_version, ANVIL_VERSION);
}

TEST(Checkpoint, KeepsTheNewestAndRotatesOlderOnes) {
  TempDir dir;
  CheckpointManager manager(dir.path(), 2);
  for (int64_t step : {10, 20, 30, 40}) save(manager, step);
  EXPECT_EQ(manager.committed_steps(), (std::vector<int64_t>{30, 40}));
  EXPECT_FALSE(fs::exists(dir / "step-0000010"));
  EXPECT_FALSE(fs::exists(dir / "step-0000020"));
  std::optional<LoadedCheckpoint> latest = manager.find_latest_valid();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 40);
  EXPECT_EQ(latest->info["tokens_seen"], 40000);

  CheckpointManager keep_one(dir.path(), 1);
  save(keep_one, 50);
  EXPECT_EQ(keep_one.committed_steps(), (std::vector<int64_t>{50}));
  EXPECT_NE(error_of([&] { CheckpointManager(dir.path(), 0); }).find("keep must be at least 1"),
            std::string::npos);
}

TEST(Checkpoint, UncommittedFoldersAreIgnoredThenCleanedUp) {
  TempDir dir;
  CheckpointManager manager(dir.path(), 5);
  save(manager, 20);
  // A save that crashed while ranks were writing, and one that crashed before COMMIT.
  write_trainer_files(manager.prepare(30), 30);
  fs::create_directories(dir / "step-0000040");
  write_trainer_files(dir / "step-0000040", 40);
  EXPECT_EQ(manager.committed_steps(), (std::vector<int64_t>{20}));
  std::optional<LoadedCheckpoint> latest = manager.find_latest_valid();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 20);

  save(manager, 50);
  EXPECT_FALSE(fs::exists(dir / "step-0000030.partial"));
  EXPECT_FALSE(fs::exists(dir / "step-0000040"));
  EXPECT_EQ(manager.committed_steps(), (std::vector<int64_t>{20, 50}));
}

TEST(Checkpoint, PrepareStartsFromAnEmptyStagingFolder) {
  TempDir dir;
  CheckpointManager manager(dir.path(), 2);
  const fs::path staging = manager.prepare(7);
  write_file_atomic(staging / "stale.bin", "old");
  EXPECT_EQ(manager.prepare(7), staging);
  EXPECT_TRUE(fs::is_empty(staging));
  EXPECT_NE(error_of([&] { manager.commit(8, {}); }).find("call prepare(8) before writing files"),
            std::string::npos);
}

TEST(Checkpoint, CorruptNewestFallsBackWithAWarning) {
  TempDir dir;
  CheckpointManager manager(dir.path(), 3);
  save(manager, 20);
  save(manager, 40);
  flip_byte(dir / "step-0000040" / "model.safetensors", 200);

  ::testing::internal::CaptureStderr();
  std::optional<LoadedCheckpoint> latest = manager.find_latest_valid();
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 20);
  EXPECT_NE(warnings.find("[checkpoint] skipping " + (dir / "step-0000040").string() +
                          ": it fails verification (model.safetensors checksum mismatch)"),
            std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("[checkpoint] falling back to " + (dir / "step-0000020").string() +
                          ", the newest checkpoint that verifies"),
            std::string::npos)
      << warnings;
  EXPECT_EQ(CheckpointManager::verification_problem(dir / "step-0000040"),
            "model.safetensors checksum mismatch");
  EXPECT_FALSE(CheckpointManager::verification_problem(dir / "step-0000020").has_value());
}

TEST(Checkpoint, MissingTruncatedAndTamperedFilesAreDetected) {
  TempDir dir;
  CheckpointManager manager(dir.path(), 5);
  for (int64_t step : {10, 20, 30, 40}) save(manager, step);
  fs::remove(dir / "step-0000040" / "rank-00001" / "optimizer.json");
  fs::resize_file(dir / "step-0000030" / "trainer_state.json", 3);
  testing::write_raw(dir / "step-0000020" / "manifest.json",
                     testing::read_raw(dir / "step-0000020" / "manifest.json") + " ");

  ::testing::internal::CaptureStderr();
  std::optional<LoadedCheckpoint> latest = manager.find_latest_valid();
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 10);
  EXPECT_NE(warnings.find("step-0000040: it fails verification (rank-00001/optimizer.json is "
                          "missing)"),
            std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("step-0000030: it fails verification (trainer_state.json has 3 "
                          "bytes, the manifest says 11)"),
            std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("step-0000020: it fails verification (manifest.json checksum "
                          "mismatch)"),
            std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("falling back to " + (dir / "step-0000010").string()),
            std::string::npos)
      << warnings;
}

TEST(Checkpoint, AllCorruptMeansNoCheckpoint) {
  TempDir dir;
  CheckpointManager manager(dir.path(), 3);
  save(manager, 20);
  save(manager, 40);
  flip_byte(dir / "step-0000020" / "trainer_state.json", 2);
  flip_byte(dir / "step-0000040" / "model.safetensors", 300);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(manager.find_latest_valid().has_value());
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("step-0000020: it fails verification (trainer_state.json checksum "
                          "mismatch)"),
            std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("no committed checkpoint in " + dir.path().string() + " verifies"),
            std::string::npos)
      << warnings;
  EXPECT_FALSE(CheckpointManager(dir / "never-created", 1).find_latest_valid().has_value());
}

TEST(Checkpoint, ExplicitLoadOfACorruptOrUncommittedCheckpointIsAnError) {
  TempDir dir;
  CheckpointManager manager(dir.path(), 3);
  save(manager, 20);
  flip_byte(dir / "step-0000020" / "model.safetensors", 100);
  const std::string message = error_of([&] { CheckpointManager::load(dir / "step-0000020"); });
  EXPECT_EQ(message, "[checkpoint] " + (dir / "step-0000020").string() +
                         " is not a valid checkpoint: model.safetensors checksum mismatch");

  write_trainer_files(manager.prepare(30), 30);
  EXPECT_NE(error_of([&] { CheckpointManager::load(manager.staging_dir(30)); })
                .find("not committed (no COMMIT marker)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { CheckpointManager::load(dir / "step-0000099"); })
                .find("no such checkpoint folder"),
            std::string::npos);
}

TEST(Checkpoint, RecommittingAStepReplacesItWithAWarning) {
  TempDir dir;
  CheckpointManager manager(dir.path(), 3);
  save(manager, 20);
  const fs::path staging = manager.prepare(20);
  write_trainer_files(staging, 21);  // different content for the same step
  ::testing::internal::CaptureStderr();
  manager.commit(20, {{"second", true}});
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("replacing the committed checkpoint"), std::string::npos);
  LoadedCheckpoint loaded = CheckpointManager::load(dir / "step-0000020");
  EXPECT_EQ(loaded.info["second"], true);
  EXPECT_EQ(read_file(dir / "step-0000020" / "trainer_state.json"), "{\"step\":21}");
}

// A resume that fell back past corrupt newer checkpoints commits an older step while those
// still exist: rotation counts them but never removes the checkpoint just committed (the only
// one that verifies), so with keep = 1 the corrupt newer step goes instead. Pruning runs only
// inside commit, so no checkpoint is ever removed before a newer one is committed.
TEST(Checkpoint, RotationNeverRemovesTheCheckpointJustCommitted) {
  TempDir dir;
  CheckpointManager manager(dir.path(), 1);
  save(manager, 10);
  save(manager, 20);
  EXPECT_EQ(manager.committed_steps(), (std::vector<int64_t>{20}));
  flip_byte(dir / "step-0000020" / "model.safetensors", 200);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(manager.find_latest_valid().has_value());
  ::testing::internal::GetCapturedStderr();

  save(manager, 15);
  EXPECT_EQ(manager.committed_steps(), (std::vector<int64_t>{15}));
  std::optional<LoadedCheckpoint> latest = manager.find_latest_valid();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 15);

  // A failed save of a newer step removes only its own leftovers.
  manager.prepare(16);
  manager.abandon(16);
  EXPECT_EQ(manager.committed_steps(), (std::vector<int64_t>{15}));
  EXPECT_FALSE(CheckpointManager::verification_problem(dir / "step-0000015").has_value());

  // With keep = 2 a corrupt newer step is kept beside the new commit, which still survives.
  CheckpointManager two(dir.path(), 2);
  save(two, 30);
  flip_byte(dir / "step-0000030" / "trainer_state.json", 2);
  save(two, 25);
  EXPECT_EQ(two.committed_steps(), (std::vector<int64_t>{25, 30}));
  ::testing::internal::CaptureStderr();
  latest = two.find_latest_valid();
  ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 25);
}

}  // namespace
}  // namespace anvil
