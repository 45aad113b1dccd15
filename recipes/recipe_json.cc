#include "recipes/recipe_json.h"

#include <nlohmann/json.hpp>

namespace hutch::recipes {

Result<RecipeJson> parse_recipe_json(std::string_view text) {
  RecipeJson recipe;
  try {
    const nlohmann::json doc = nlohmann::json::parse(text);
    if (!doc.is_object()) return plain_error("recipe.json", "not a JSON object");
    for (const auto& [key, value] : doc.items()) {
      if (key == "base") {
        recipe.base = value.get<std::string>();
      } else if (key == "env") {
        for (const auto& [k, v] : value.items())
          recipe.env.push_back(k + "=" + v.get<std::string>());
      } else if (key == "network") {
        if (!value.is_string() && !value.is_object())
          return plain_error("recipe.json", "network must be a mode or a policy object");
        recipe.network = value.dump();
      } else if (key == "timeout") {
        recipe.timeout = value.get<std::string>();
      } else if (key == "limits") {
        for (const auto& [limit, v] : value.items()) {
          if (limit == "memory") {
            recipe.memory = v.get<std::string>();
          } else if (limit == "pids") {
            // get<uint64_t>() converts -1 and 1e300 too (the latter undefined: UBSan).
            if (!v.is_number_unsigned())
              return plain_error("recipe.json", "limits.pids must be a positive integer");
            recipe.pids = v.get<uint64_t>();
          } else if (limit == "cpus") {
            recipe.cpus = v.get<double>();
          } else {
            return plain_error("recipe.json", "unknown limit \"" + limit + "\"");
          }
        }
      } else {
        return plain_error("recipe.json", "unknown key \"" + key + "\"");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return plain_error("recipe.json", e.what());
  }
  return recipe;
}

}  // namespace hutch::recipes
