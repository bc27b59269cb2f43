// Sampling: greedy, temperature, top-k and top-p select from the right distribution and are
// reproducible from (seed, draws). Frequencies come from a fixed seed, so they cannot flake.
#include "model/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"

namespace anvil {
namespace {

std::vector<double> frequencies(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<double> counts(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) counts[static_cast<size_t>(sampler.sample(logits))] += 1.0;
  for (double& c : counts) c /= draws;
  return counts;
}

TEST(SamplingTest, GreedyPicksTheFirstMaximum) {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(argmax(logits), 1);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Sampler sampler(greedy);
  EXPECT_EQ(sampler.sample(logits), 1);
  EXPECT_EQ(sampler.draws(), 0u);
}

TEST(SamplingTest, TemperatureSamplesTheSoftmax) {
  const std::vector<float> logits{0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  for (float temperature : {1.0f, 2.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 99;
    Sampler sampler(params);
    const std::vector<double> got = frequencies(sampler, logits, 40000);
    double total = 0.0;
    std::vector<double> want;
    for (float l : logits) want.push_back(std::exp(l / temperature));
    for (double w : want) total += w;
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(got[i], want[i] / total, 0.01) << "token " << i << " at T=" << temperature;
    }
  }
}

TEST(SamplingTest, TopKAndTopPRestrictTheSupport) {
  const std::vector<float> logits{0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  SamplingParams top_k;
  top_k.top_k = 2;
  Sampler k_sampler(top_k);
  const std::vector<double> k_freq = frequencies(k_sampler, logits, 20000);
  EXPECT_EQ(k_freq[0], 0.0);
  EXPECT_EQ(k_freq[1], 0.0);
  EXPECT_NEAR(k_freq[3], 4.0 / 7.0, 0.01);
  // Probabilities 0.4, 0.3, 0.2, 0.1: top_p 0.6 keeps {3, 2} (mass 0.7 >= 0.6).
  SamplingParams top_p;
  top_p.top_p = 0.6f;
  Sampler p_sampler(top_p);
  const std::vector<double> p_freq = frequencies(p_sampler, logits, 20000);
  EXPECT_EQ(p_freq[0] + p_freq[1], 0.0);
  EXPECT_NEAR(p_freq[3], 4.0 / 7.0, 0.01);
  SamplingParams nucleus_of_one;
  nucleus_of_one.top_p = 0.05f;
  Sampler one(nucleus_of_one);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(one.sample(logits), 3);
  SamplingParams k_one;
  k_one.top_k = 1;
  Sampler k1(k_one);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(k1.sample(logits), 3);
}

TEST(SamplingTest, ReproducibleFromSeedAndDraws) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 20;
  params.top_p = 0.9f;
  params.seed = 5;
  Sampler a(params), b(params);
  std::vector<int32_t> first;
  for (int i = 0; i < 64; ++i) first.push_back(a.sample(logits));
  for (int i = 0; i < 64; ++i) ASSERT_EQ(b.sample(logits), first[static_cast<size_t>(i)]);
  Sampler resumed(params, 32);
  for (int i = 32; i < 64; ++i) ASSERT_EQ(resumed.sample(logits), first[static_cast<size_t>(i)]);
  params.seed = 6;
  Sampler other(params);
  int differences = 0;
  for (int i = 0; i < 64; ++i) differences += other.sample(logits) != first[static_cast<size_t>(i)];
  EXPECT_GT(differences, 0);
}

TEST(SamplingTest, RejectsInvalidParameters) {
  SamplingParams params;
  params.temperature = -1.0f;
  EXPECT_THROW(Sampler{params}, Error);
  params = SamplingParams{};
  params.top_p = 0.0f;
  EXPECT_THROW(Sampler{params}, Error);
  params = SamplingParams{};
  params.top_k = -3;
  EXPECT_THROW(Sampler{params}, Error);
  EXPECT_THROW(argmax({}), Error);
}

}  // namespace
}  // namespace anvil
