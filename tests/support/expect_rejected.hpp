// A rejected call: it must throw replayssm::Error about `arg` and leave every tensor of `kept` byte-identical.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "replayssm/error.hpp"
#include "support/host_tensor.hpp"

namespace replayssm::test {

template <class Op>
void expect_rejected(const std::string& what, const std::string& arg, const std::vector<const HostTensor*>& kept,
                     Op op) {
  SCOPED_TRACE(what);
  std::vector<std::vector<uint8_t>> before;
  for (const HostTensor* t : kept) before.push_back(t->bytes());
  try {
    op();
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), arg) << e.what();
    EXPECT_NE(std::string(e.what()).find(arg), std::string::npos) << e.what();
  }
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_TRUE(kept[i]->bytes() == before[i]) << "tensor " << i << " written";
}

}  // namespace replayssm::test
