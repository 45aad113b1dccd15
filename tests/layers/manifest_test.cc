// Pure logic of the layer store: names, digests, scratch names, manifests. No root needed.
#include "runtime/layers/manifest.h"

#include <gtest/gtest.h>

#include "runtime/layers/layer_store.h"
#include "runtime/layers/names.h"

namespace hutch::layers {
namespace {

const std::string kHex(64, 'a');

TEST(Names, AcceptsTagNames) {
  for (const std::string& name :
       std::vector<std::string>{"a", "web", "py3.12", "my_recipe-2", "0", std::string(64, 'x')}) {
    EXPECT_TRUE(validate_name(name).has_value()) << name;
  }
}

TEST(Names, RejectsOtherNames) {
  for (const std::string& name :
       std::vector<std::string>{"", "-x", ".hidden", "_x", "Upper", "a/b", "..", "a b", "é",
                                std::string(65, 'x'), std::string("a\0b", 3)}) {
    EXPECT_FALSE(validate_name(name).has_value()) << name;
  }
}

TEST(Names, DigestHex) {
  EXPECT_EQ(digest_hex("sha256:" + kHex).value(), kHex);
  EXPECT_EQ(digest_hex(kHex).value(), kHex);
  EXPECT_FALSE(digest_hex("sha256:" + std::string(63, 'a')).has_value());
  EXPECT_FALSE(digest_hex("sha256:" + std::string(64, 'A')).has_value());
  EXPECT_FALSE(digest_hex("sha512:" + kHex).has_value());
  EXPECT_FALSE(digest_hex("../" + std::string(61, 'a')).has_value());
}

TEST(Names, ScratchNameRoundTrip) {
  const std::string name = scratch_name(ScratchOwner{4242, 987654321}, "0badc0de");
  EXPECT_EQ(name, ".incoming-4242-987654321-0badc0de");
  auto owner = parse_scratch_name(name);
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->pid, 4242);
  EXPECT_EQ(owner->start_time, 987654321u);
  EXPECT_FALSE(parse_scratch_name(".incoming-x-1-a").has_value());
  EXPECT_FALSE(parse_scratch_name(".incoming-12").has_value());
  EXPECT_FALSE(parse_scratch_name(kHex).has_value());
}

TEST(Manifest, RoundTripsEveryField) {
  LayerManifest manifest;
  manifest.digest = "sha256:" + kHex;
  manifest.tree_digest = "sha256:" + std::string(64, 'b');
  manifest.parents = {"sha256:" + std::string(64, 'c'), "sha256:" + std::string(64, 'd')};
  manifest.created = 1700000000;
  manifest.size = 1ull << 40;
  manifest.built_by = "recipe web\nline two \\ with backslash =";
  manifest.cache_key = "key=with=equals";
  auto parsed = parse_manifest(format_manifest(manifest));
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
  EXPECT_EQ(*parsed, manifest);
}

TEST(Manifest, IgnoresUnknownKeysRejectsBadInput) {
  const std::string good = "version=1\ndigest=sha256:" + kHex + "\nfuture=thing\n";
  EXPECT_TRUE(parse_manifest(good).has_value());
  EXPECT_FALSE(parse_manifest("digest=sha256:" + kHex + "\n").has_value());  // no version
  EXPECT_FALSE(parse_manifest("version=2\ndigest=x\n").has_value());
  EXPECT_FALSE(parse_manifest("version=1\n").has_value());  // no digest
  EXPECT_FALSE(parse_manifest(good + "size=12x\n").has_value());
  EXPECT_FALSE(parse_manifest(good + "no equals sign\n").has_value());
  EXPECT_FALSE(parse_manifest(good + "built_by=bad \\q escape\n").has_value());
}

TEST(LayerDigest, DependsOnParentsAndTheirOrder) {
  const std::string tree = "sha256:" + kHex;
  const std::string p1 = "sha256:" + std::string(64, '1');
  const std::string p2 = "sha256:" + std::string(64, '2');
  auto none = layer_digest(tree, {});
  auto one = layer_digest(tree, {p1});
  auto both = layer_digest(tree, {p1, p2});
  auto swapped = layer_digest(tree, {p2, p1});
  EXPECT_NE(*none, *one);
  EXPECT_NE(*one, *both);
  EXPECT_NE(*both, *swapped);
  EXPECT_EQ(*both, *layer_digest(tree, {p1, p2}));
  EXPECT_TRUE(none->starts_with("sha256:"));
  EXPECT_EQ(none->size(), 7u + 64u);
}

}  // namespace
}  // namespace hutch::layers
