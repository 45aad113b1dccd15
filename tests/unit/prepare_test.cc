// prepare() holds every caller's spec to the spec policy (runtime/defaults.h), not only the CLI's
// and hutchd's: a bad hostname or env entry is refused as invalid input before anything is done.
#include <gtest/gtest.h>

#include "runtime/launch.h"

namespace hutch {
namespace {

SandboxSpec valid_spec() {
  SandboxSpec spec;
  spec.argv = {"/bin/true"};
  spec.lower_dirs = {"/"};
  return spec;
}

TEST(Prepare, RefusesAHostnameOutsideThePolicy) {
  for (const char* name : {"", "a b", "a/b", "under_score"}) {
    SandboxSpec spec = valid_spec();
    spec.hostname = name;
    Prepared prepared;
    auto r = prepare(spec, prepared, true);
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().step, "hostname") << name;
    EXPECT_EQ(r.error().kind, ErrorKind::kInvalid) << name;
  }
}

TEST(Prepare, RefusesEnvEntriesOutsideThePolicy) {
  for (const std::string& entry : {std::string("1A=x"), std::string("noeq"), std::string("=x"),
                                   std::string("A=x\0y", 5), "K" + std::string(300, 'k') + "=v"}) {
    SandboxSpec spec = valid_spec();
    spec.env = {"PATH=/bin", entry};
    Prepared prepared;
    auto r = prepare(spec, prepared, true);
    ASSERT_FALSE(r) << entry;
    EXPECT_EQ(r.error().step, "env") << entry;
    EXPECT_EQ(r.error().kind, ErrorKind::kInvalid) << entry;
  }
}

TEST(Prepare, AcceptsASpecWithinThePolicy) {
  SandboxSpec spec = valid_spec();
  spec.hostname = "box-1.local";
  spec.env = {"PATH=/bin", "_A1=x=y"};
  Prepared prepared;
  auto r = prepare(spec, prepared, true);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(prepared.child.mode, ChildPlan::Mode::kOneShot);
  EXPECT_STREQ(prepared.child.hostname, "box-1.local");
}

TEST(Prepare, ALiveSandboxServesExecs) {
  SandboxSpec spec = valid_spec();
  spec.argv.clear();
  Prepared prepared;
  ASSERT_TRUE(prepare(spec, prepared, false));
  EXPECT_EQ(prepared.child.mode, ChildPlan::Mode::kLive);
}

}  // namespace
}  // namespace hutch
