// Launcher detection reads the variables mpirun, srun and PMI/PMIx launchers set; a plain
// process (as ctest runs this test) is not launched.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "comm/launch_env.h"
#include "core/error.h"

namespace anvil {
namespace {

// Sets or clears one environment variable for the lifetime of the guard.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (previous_) setenv(name_, previous_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

struct CleanLauncherEnv {
  ScopedEnv ompi{"OMPI_COMM_WORLD_SIZE", nullptr};
  ScopedEnv pmi{"PMI_SIZE", nullptr};
  ScopedEnv pmix{"PMIX_RANK", nullptr};
  ScopedEnv slurm{"SLURM_NTASKS", nullptr};
};

TEST(LaunchEnvironment, PlainProcessIsNotLaunched) {
  CleanLauncherEnv clean;
  const LaunchEnvironment env = detect_launch_environment();
  EXPECT_FALSE(env.launched);
  EXPECT_EQ(env.world_size, 0);
}

TEST(LaunchEnvironment, ReadsOpenMpiAndPmiSizes) {
  CleanLauncherEnv clean;
  {
    ScopedEnv size("OMPI_COMM_WORLD_SIZE", "4");
    const LaunchEnvironment env = detect_launch_environment();
    EXPECT_TRUE(env.launched);
    EXPECT_EQ(env.world_size, 4);
    EXPECT_EQ(env.evidence, "OMPI_COMM_WORLD_SIZE=4");
  }
  {
    ScopedEnv size("PMI_SIZE", "2");
    const LaunchEnvironment env = detect_launch_environment();
    EXPECT_TRUE(env.launched);
    EXPECT_EQ(env.world_size, 2);
  }
}

TEST(LaunchEnvironment, PmixRankWithOrWithoutSlurmSize) {
  CleanLauncherEnv clean;
  ScopedEnv rank("PMIX_RANK", "1");
  LaunchEnvironment env = detect_launch_environment();
  EXPECT_TRUE(env.launched);
  EXPECT_EQ(env.world_size, 0);
  EXPECT_EQ(env.evidence, "PMIX_RANK=1");
  ScopedEnv tasks("SLURM_NTASKS", "8");
  env = detect_launch_environment();
  EXPECT_EQ(env.world_size, 8);
}

TEST(LaunchEnvironment, RejectsGarbageSizes) {
  CleanLauncherEnv clean;
  ScopedEnv size("OMPI_COMM_WORLD_SIZE", "four");
  EXPECT_THROW(detect_launch_environment(), Error);
  ScopedEnv zero("OMPI_COMM_WORLD_SIZE", "0");
  EXPECT_THROW(detect_launch_environment(), Error);
}

}  // namespace
}  // namespace anvil
