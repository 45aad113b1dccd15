// `hutch layers ls|du|rm|gc`: the layer store.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/verbs.h"
#include "runtime/layers/layer_store.h"
#include "runtime/recipes/recipe.h"

namespace hutch::cli {

int layers_list(bool json, const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto all = store->list();
  if (!all) return fail(all.error());
  nlohmann::json out = nlohmann::json::array();
  for (const layers::LayerInfo& layer : *all) {
    if (json) {
      out.push_back({{"digest", layer.digest},
                     {"parents", layer.manifest.parents},
                     {"created", layer.manifest.created},
                     {"size", layer.manifest.size},
                     {"built_by", layer.manifest.built_by}});
    } else {
      std::printf("%s %10llu bytes  %s\n", layer.digest.c_str(),
                  static_cast<unsigned long long>(layer.manifest.size),
                  layer.manifest.built_by.c_str());
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int layers_du(const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto all = store->list();
  if (!all) return fail(all.error());
  uint64_t total = 0;
  for (const layers::LayerInfo& layer : *all) {
    std::error_code ignored;
    const uint64_t image = std::filesystem::file_size(store->image_path(layer.digest), ignored);
    total += layer.manifest.size + (ignored ? 0 : image);
  }
  std::printf("%zu layers, %llu bytes (trees and images)\n", all->size(),
              static_cast<unsigned long long>(total));
  return 0;
}

int layers_remove(const std::vector<std::string>& digests, const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto in_use = recipes::layers_in_use(*store);
  if (!in_use) return fail(in_use.error());
  for (const std::string& digest : digests) {
    auto info = store->get(digest);
    if (!info) return fail(info.error());
    if (std::ranges::find(*in_use, info->digest) != in_use->end())
      return fail(
          plain_error("layers rm", info->digest + " is in use by a running sandbox").error());
    if (auto r = store->remove(info->digest); !r) return fail(r.error());
  }
  return 0;
}

int layers_gc(const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto in_use = recipes::layers_in_use(*store);
  if (!in_use) return fail(in_use.error());
  auto removed = store->gc(*in_use);
  if (!removed) return fail(removed.error());
  for (const std::string& digest : *removed) std::printf("removed %s\n", digest.c_str());
  return 0;
}

}  // namespace hutch::cli
