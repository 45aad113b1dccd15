#include <gtest/gtest.h>

#include "runtime/features.h"

namespace hutch {
namespace {

TEST(KernelVersion, ReadsMajorAndMinorOfDistributionReleases) {
  EXPECT_EQ(kernel_version("6.1.0-27-cloud-amd64"), std::make_pair(6, 1));
  EXPECT_EQ(kernel_version("6.18.3"), std::make_pair(6, 18));
  EXPECT_EQ(kernel_version("5.15.0-91-generic"), std::make_pair(5, 15));
  EXPECT_EQ(kernel_version("5.14.0-362.8.1.el9_3.x86_64"), std::make_pair(5, 14));
}

TEST(KernelVersion, GarbageIsZero) {
  EXPECT_EQ(kernel_version(""), std::make_pair(0, 0));
  EXPECT_EQ(kernel_version("linux"), std::make_pair(0, 0));
  EXPECT_EQ(kernel_version("6"), std::make_pair(0, 0));
}

}  // namespace
}  // namespace hutch
