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

// recipe.json's "network" (a create's form: a mode string, or an object with "mode" and rules):
// its mode. hutch-egress checks the rules of filtered and open (daemon/json_codec.h).
Result<std::string> network_mode(const std::string& network) {
  const auto value = nlohmann::json::parse(network, nullptr, false);
  std::string mode;
  if (value.is_string()) mode = value.get<std::string>();
  if (value.is_object() && value.contains("mode") && value["mode"].is_string())
    mode = value["mode"].get<std::string>();
  if (mode != "none" && mode != "loopback" && mode != "filtered" && mode != "open")
    return plain_error("recipe.json",
                       "network wants none, loopback, filtered or open, or an "
                       "object with one as its mode, got " +
                           network);
  if ((mode == "none" || mode == "loopback") && value.is_object()) {
    for (const char* rules : {"allow", "deny", "inject"}) {
      if (value.contains(rules))
        return plain_error("recipe.json", std::string("network: ") + rules +
                                              " rules need mode filtered or open, not " + mode);
    }
  }
  return mode;
}

// recipe.json (recipes/recipe_json.h). Command-line options win over it. Returns its network's
// mode, "loopback" when it names none.
Result<std::string> apply_recipe_json(RecipeOptions& recipe) {
  const std::string path = recipe.dir + "/recipe.json";
  if (access(path.c_str(), F_OK) != 0) return std::string("loopback");
  auto text = HUTCH_TRY(read_file(path));
  auto parsed = HUTCH_TRY(recipes::parse_recipe_json(text));
  std::string mode = "loopback";
  if (parsed.network) mode = HUTCH_TRY(network_mode(*parsed.network));
  if (recipe.base.empty() && parsed.base) recipe.base = *parsed.base;
  parsed.env.insert(parsed.env.end(), recipe.env.begin(), recipe.env.end());
  recipe.env = std::move(parsed.env);
  if (recipe.sandbox.timeout.empty() && parsed.timeout) recipe.sandbox.timeout = *parsed.timeout;
  if (recipe.sandbox.memory.empty() && parsed.memory) recipe.sandbox.memory = *parsed.memory;
  if (!recipe.sandbox.pids) recipe.sandbox.pids = parsed.pids;
  if (!recipe.sandbox.cpus) recipe.sandbox.cpus = parsed.cpus;
  return mode;
}

}  // namespace

Result<bool> recipe_needs_egress(const RecipeOptions& recipe) {
  RecipeOptions applied = recipe;
  const std::string mode = HUTCH_TRY(apply_recipe_json(applied));
  const bool egress = mode == "filtered" || mode == "open";
  if (const std::string given = egress_only_options(recipe.sandbox); !egress && !given.empty())
    return plain_error("recipe build", given +
                                           " apply to a filtered or open network in "
                                           "recipe.json only; setup.sh's is " +
                                           mode);
  return egress;
}

int recipe_build(RecipeOptions recipe, const std::string& state_dir, UniqueFd netns) {
  auto mode = apply_recipe_json(recipe);
  if (!mode) return fail(mode.error());
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
  // recipe.json's network is setup.sh's alone, as in hutchd's bakes: the recipe's sandboxes get
  // their own run's or create's.
  if (*mode == "none") spec->net = NetMode::kNone;
  const bool egress = *mode == "filtered" || *mode == "open";
  if (egress != static_cast<bool>(netns)) {
    const std::string why = egress ? " runs setup.sh beside the network engine: hutch recipe "
                                     "build hands it to hutch-egress"
                                   : " takes no egress namespace";
    return fail(plain_error("recipe.json", "network " + *mode + why).error());
  }
  if (egress) spec->net = NetMode::kHostOwned;
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  recipes::BakeRequest request;
  auto dir = std::filesystem::weakly_canonical(recipe.dir);
  request.recipe_dir = dir.string();
  request.name = recipe.name_given ? recipe.name : dir.filename().string();
  request.base = recipe.base.empty() ? "host" : recipe.base;
  request.bake_env = std::move(bake_env);
  request.sandbox = std::move(*spec);
  request.netns_fd = netns ? netns.get() : -1;
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
