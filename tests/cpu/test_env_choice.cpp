// The kernel-variant switch parser (src/cuda/env_choice.hpp): plain C++, so it is checked here, on every machine.
#include <gtest/gtest.h>

#include "cuda/env_choice.hpp"
#include "support/scoped_env.hpp"
#include "replayssm/error.hpp"

using replayssm::Error;
using replayssm::cuda::env_choice;
using replayssm::test::ScopedEnv;

namespace {
constexpr const char* kVar = "REPLAYSSM_TEST_ENV_CHOICE";
}

TEST(EnvChoice, UnsetOrEmptyIsTheDefault) {
  unsetenv(kVar);
  EXPECT_EQ(env_choice(kVar, {"fused", "split"}), -1);
  const ScopedEnv empty(kVar, "");
  EXPECT_EQ(env_choice(kVar, {"fused", "split"}), -1);
}

TEST(EnvChoice, IndexOfTheValue) {
  {
    const ScopedEnv e(kVar, "split");
    EXPECT_EQ(env_choice(kVar, {"fused", "split"}), 1);
  }
  {
    const ScopedEnv e(kVar, "8");
    EXPECT_EQ(env_choice(kVar, {"1", "2", "4", "8"}), 3);
  }
}

TEST(EnvChoice, AnythingElseIsAnErrorNamingTheVariableAndTheValues) {
  for (const char* bad : {"Split", "3", " 1", "split "}) {
    const ScopedEnv e(kVar, bad);
    try {
      env_choice(kVar, {"fused", "split", "1"});
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& err) {
      const std::string what = err.what();
      EXPECT_NE(what.find(kVar), std::string::npos) << what;
      EXPECT_NE(what.find("fused, split, 1"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    }
  }
}
