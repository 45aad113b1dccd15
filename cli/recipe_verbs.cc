// `hutch recipe build|ls`: bake setup.sh into a layer of the store, list the tags.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "cli/verbs.h"
#include "recipes/recipe_json.h"
#include "runtime/layers/layer_store.h"
#include "runtime/recipes/recipe.h"

namespace hutch::cli {
namespace {

// recipe.json (recipes/recipe_json.h). Command-line options win over it.
Result<void> apply_recipe_json(RecipeOptions& recipe) {
  const std::string path = recipe.dir + "/recipe.json";
  if (access(path.c_str(), F_OK) != 0) return {};
  auto text = HUTCH_TRY(read_file(path));
  auto parsed = HUTCH_TRY(recipes::parse_recipe_json(text));
  // Its filtered and open modes need hutchd's network engine; none of it is silently dropped.
  if (parsed.network)
    return plain_error("recipe.json",
                       "network is applied by hutchd's bakes (POST /v1/recipes, hutch recipe "
                       "build --socket/--url); this one-shot build cannot run setup.sh with it");
  if (recipe.base.empty() && parsed.base) recipe.base = *parsed.base;
  parsed.env.insert(parsed.env.end(), recipe.env.begin(), recipe.env.end());
  recipe.env = std::move(parsed.env);
  if (recipe.sandbox.timeout.empty() && parsed.timeout) recipe.sandbox.timeout = *parsed.timeout;
  if (recipe.sandbox.memory.empty() && parsed.memory) recipe.sandbox.memory = *parsed.memory;
  if (!recipe.sandbox.pids) recipe.sandbox.pids = parsed.pids;
  if (!recipe.sandbox.cpus) recipe.sandbox.cpus = parsed.cpus;
  return {};
}

}  // namespace

int recipe_build(RecipeOptions recipe, const std::string& state_dir) {
  if (auto r = apply_recipe_json(recipe); !r) return fail(r.error());
  std::vector<std::string> bake_env;
  for (const std::string& kv : recipe.env) {
    auto parsed = parse_env(kv);
    if (!parsed) return fail(parsed.error());
    bake_env.push_back(*parsed);
  }
  recipe.sandbox.env.clear();
  recipe.sandbox.command = {"true"};  // replaced by bake()
  auto spec = make_spec(recipe.sandbox, state_dir);
  if (!spec) return fail(spec.error());
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  recipes::BakeRequest request;
  auto dir = std::filesystem::weakly_canonical(recipe.dir);
  request.recipe_dir = dir.string();
  request.name = recipe.name_given ? recipe.name : dir.filename().string();
  request.base = recipe.base.empty() ? "host" : recipe.base;
  request.bake_env = std::move(bake_env);
  request.sandbox = std::move(*spec);
  auto outcome = recipes::bake(*store, request);
  if (!outcome) {
    if (recipe.json) {
      std::printf("%s\n",
                  nlohmann::json{{"name", request.name}, {"error", outcome.error().message()}}
                      .dump()
                      .c_str());
    }
    return fail(outcome.error());
  }
  if (recipe.json) {
    std::printf("%s\n", nlohmann::json{{"name", request.name},
                                       {"digest", outcome->digest},
                                       {"cached", outcome->cached}}
                            .dump()
                            .c_str());
  } else {
    std::printf("%s %s %s\n", request.name.c_str(), outcome->digest.c_str(),
                outcome->cached ? "cached" : "built");
  }
  return 0;
}

int recipe_list(bool json, const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto tags = store->tags();
  if (!tags) return fail(tags.error());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, digest] : *tags) {
    auto info = store->get(digest);
    if (!info) return fail(info.error());
    if (json) {
      out.push_back({{"name", name},
                     {"digest", digest},
                     {"created", info->manifest.created},
                     {"size", info->manifest.size},
                     {"base", info->manifest.base}});
    } else {
      std::printf("%-24s %s %10llu bytes\n", name.c_str(), digest.c_str(),
                  static_cast<unsigned long long>(info->manifest.size));
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace hutch::cli
