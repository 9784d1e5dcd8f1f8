// On/off environment variables: unset or empty gives the default, "1" on, "0" off, anything else
// an error that names the variable, its value and what it switches.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "kernels/common/env_switch.h"
#include "runtime/env.h"
#include "runtime/ops/conv.h"
#include "tests/common/expect_error.h"

namespace ember {
namespace {

constexpr const char* kMeaning = "do the thing";

TEST(EnvSwitch, UnsetOrEmptyGivesTheDefaultAndOneOrZeroSwitches) {
  for (const bool fallback : {false, true}) {
    EXPECT_EQ(kernels::parse_env_switch("EMBER_X", nullptr, fallback, kMeaning), fallback);
    EXPECT_EQ(kernels::parse_env_switch("EMBER_X", "", fallback, kMeaning), fallback);
    EXPECT_TRUE(kernels::parse_env_switch("EMBER_X", "1", fallback, kMeaning));
    EXPECT_FALSE(kernels::parse_env_switch("EMBER_X", "0", fallback, kMeaning));
  }
}

TEST(EnvSwitch, AnythingElseIsRefusedWithTheNameTheValueAndWhatOneMeans) {
  // What a user might write for on or off, and near misses: none is guessed at.
  for (const char* text :
       {"true", "false", "yes", "no", "on", "off", "TRUE", "2", "-1", "01", " 1", "1 ", "0x1"}) {
    try {
      kernels::parse_env_switch("EMBER_X", text, true, kMeaning);
      ADD_FAILURE() << "EMBER_X='" << text << "' was accepted";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(std::string("EMBER_X='") + text + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("expected 1 (do the thing) or 0, or unset for the default (1)"),
                std::string::npos)
          << message;
    }
  }
}

TEST(EnvSwitch, TheRuntimeReadsTheEnvironmentAndReportsAnEmberError) {
  constexpr const char* kName = "EMBER_TEST_ENV_SWITCH";
  unsetenv(kName);
  EXPECT_TRUE(env_switch(kName, true, kMeaning));
  setenv(kName, "0", 1);
  EXPECT_FALSE(env_switch(kName, true, kMeaning));
  setenv(kName, "1", 1);
  EXPECT_TRUE(env_switch(kName, false, kMeaning));
  setenv(kName, "maybe", 1);
  EXPECT_ERROR_WITH(env_switch(kName, false, kMeaning), "EMBER_TEST_ENV_SWITCH='maybe'",
                    "expected 1 (do the thing) or 0", "default (0)");
  unsetenv(kName);
}

// The convolution switches are read once, on first use, so each case runs in a process of its own
// (a death test in the "threadsafe" style starts this binary afresh). A bad value is an exception
// there, not a termination before main, and not a silent default.
void first_use_says(const char* name, const char* value, bool (*first_use)()) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv(name, value, 1);
        try {
          first_use();
        } catch (const Error& error) {
          std::cerr << error.what() << std::endl;
          std::exit(0);
        }
        std::exit(1);
      },
      testing::ExitedWithCode(0), std::string(name) + "='" + value + "': expected 1 \\(");
}

TEST(EnvSwitch, ConvolutionSwitchesRefuseABadValueOnFirstUse) {
  first_use_says("EMBER_CUDNN_BENCHMARK", "true", conv_benchmark);
  first_use_says("EMBER_CUDNN_DETERMINISTIC", "false", conv_deterministic);
  first_use_says("EMBER_CUDNN_GRAPH", "yes", conv_graph_api);
}

}  // namespace
}  // namespace ember
